"""The CUDA-ordering simulator's rules, one by one (gpufeed.simcuda): what runs when, what
memory is reused when, what reads as poison, what counts as a sync, and what it reports as a race."""

import math
import threading

import pytest
import torch

from gpufeed.simcuda import CudaRaceError, SimTensor, simulated_cuda

pytestmark = pytest.mark.simcuda


def pinned_batch(value: float, n: int = 8) -> torch.Tensor:
    return torch.full((n,), value).pin_memory()


# --- streams and events --------------------------------------------------------------------------

def test_work_runs_only_when_the_host_waits_for_it():
    with simulated_cuda(seed=0) as sim:
        x = pinned_batch(3.0).to("cuda", non_blocking=True)
        y = x * 2
        assert sim.ran == [] and y.is_cuda and y.device == torch.device("cuda", 0)
        assert y.sum().item() == 48.0  # the host waits: the copy, the multiply and the sum run, in order
        assert [w.what.split()[0] for w in sim.ran] == ["copy", "mul", "sum", "_local_scalar_dense"]


def test_a_side_stream_read_without_a_wait_is_a_race_and_with_one_it_is_not():
    with simulated_cuda() as sim:
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x = pinned_batch(1.0).to("cuda", non_blocking=True)
        with pytest.raises(CudaRaceError, match="read after write.*wait_stream"):
            x + 1  # the default stream reads what side stream 1 writes, and nothing orders them
    for wait in ("stream", "event"):
        with simulated_cuda() as sim:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                x = pinned_batch(1.0).to("cuda", non_blocking=True)
            if wait == "stream":
                torch.cuda.current_stream().wait_stream(side)
            else:
                torch.cuda.current_stream().wait_event(side.record_event())
            assert (x + 1).sum().item() == 16.0 and sim.races == []


def test_waiting_for_an_event_that_was_never_recorded_waits_for_nothing():
    with simulated_cuda() as sim:
        torch.cuda.current_stream().wait_event(torch.cuda.Event())
        assert sim.default.issued == 0


def test_event_query_synchronize_and_which_waits_torch_reports():
    with simulated_cuda(seed=0) as sim:
        x = pinned_batch(2.0).to("cuda", non_blocking=True) + 1
        done = torch.cuda.Event()
        done.record()
        polls = 1
        while not done.query():  # the GPU moves on while the host polls
            polls += 1
        assert polls >= 2 and sim.syncs == []
        # every poll is a host wait (a loop that spins on query() waits for the GPU), by thread,
        # though set_sync_debug_mode reports none of them
        assert sim.waits == ["Event.query() (a poll)"] * polls
        assert sim.waits_by_thread == {threading.current_thread().name: sim.waits}
        done.synchronize()
        torch.cuda.synchronize()
        assert sim.syncs == [] and sim.waits[polls:] == ["Event.synchronize()", "torch.cuda.synchronize()"]
        assert torch.cuda.current_stream().query() and sim.waits[-1] == "default stream.query() (a poll)"
        torch.cuda.current_stream().synchronize()  # c10::cuda::stream_synchronize: reported
        assert len(sim.syncs) == 1 and x.sum().item() == 24.0


def test_the_current_stream_belongs_to_each_thread_and_starts_as_the_shared_default():
    with simulated_cuda() as sim:
        side = torch.cuda.Stream()
        seen = []
        with torch.cuda.stream(side):
            thread = threading.Thread(target=lambda: seen.append(torch.cuda.current_stream()))
            thread.start()
            thread.join()
            assert torch.cuda.current_stream() is side
        assert seen == [sim.default] and torch.cuda.current_stream() is sim.default


def test_other_seeds_are_other_legal_orders():
    ran = {}
    for seed in (0, 1, 2):
        with simulated_cuda(seed=seed) as sim:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                pinned_batch(1.0).to("cuda", non_blocking=True)
            torch.empty(4, device="cuda").fill_(1)
            ran[seed] = [w.stream.name for w in sim.ran]
    assert ran[0] == [] and ran[1] == ["side stream 1"] and ran[2] == ["default stream"]


# --- copies --------------------------------------------------------------------------------------

def test_a_copy_from_pinned_memory_reads_the_buffer_when_it_runs():
    with simulated_cuda(seed=0, races="record") as sim:
        host = pinned_batch(1.0)
        x = host.to("cuda", non_blocking=True)
        host.fill_(7.0)  # before the copy ran: the copy takes 7s, and that is a race
        assert x.cpu().tolist() == [7.0] * 8
        assert len(sim.races) == 1 and sim.races[0].later.actor == "host"


def test_a_copy_from_pageable_memory_is_staged_at_once_and_a_blocking_one_is_a_sync():
    with simulated_cuda(seed=0) as sim:
        host = torch.full((8,), 1.0)
        x = host.to("cuda", non_blocking=True)
        host.fill_(7.0)  # staged already: no race, the old values
        assert sim.syncs == [] and x.cpu().tolist() == [1.0] * 8
        torch.ones(2).to("cuda")
        assert len(sim.syncs) == 2  # .cpu() and the blocking copy


def test_a_dtype_change_converts_on_the_gpu_only_when_non_blocking():
    with simulated_cuda(seed=0) as sim:
        host = torch.arange(4, dtype=torch.uint8).pin_memory()
        x = host.to("cuda", torch.float32, non_blocking=True)
        assert [w.kind for w in sim.default.queue] == ["copy", "kernel"]  # uint8 travels, then converts
        y = host.to("cuda", torch.float32)  # blocking: converted on the CPU, then one copy, then a sync
        assert sim.ran[-1].kind == "copy" and len(sim.syncs) == 1 and x.dtype == y.dtype == torch.float32
        assert torch.equal(x.cpu(), y.cpu())


def test_a_non_blocking_copy_to_the_host_holds_poison_until_the_host_has_waited():
    for seed in range(4):
        with simulated_cuda(seed=seed) as sim:
            x = torch.ones(8, device="cuda")
            host = x.to("cpu", non_blocking=True)
            assert host.is_pinned() and torch.isnan(host).all()  # under every schedule
            done = torch.cuda.Event()
            done.record()
            done.synchronize()
            assert host.tolist() == [1.0] * 8 and sim.syncs == []


def test_unwritten_memory_reads_as_poison():
    with simulated_cuda() as sim:
        assert torch.isnan(torch.empty(3, device="cuda")).all()
        assert torch.empty(3, dtype=torch.uint8, device="cuda").tolist() == [0xA5] * 3
        assert torch.empty(1, dtype=torch.int64, device="cuda").item() == int.from_bytes(b"\xa5" * 8, "little", signed=True)
        assert torch.empty(2, dtype=torch.bool, device="cuda").tolist() == [True, True]
        assert math.isnan(torch.empty(2, pin_memory=True)[0].item()) and len(sim.syncs) >= 4


# --- the allocators ------------------------------------------------------------------------------

def test_freed_memory_goes_to_the_next_allocation_on_the_same_stream_at_once():
    with simulated_cuda(seed=0) as sim:
        x = torch.ones(256, device="cuda")
        y = x * 2  # pending: reads x
        address = x.data_ptr()
        del x
        z = torch.full((256,), 5.0, device="cuda")  # same stream: after y's read, so safe
        assert z.data_ptr() == address
        assert y.sum().item() == 512.0 and z.sum().item() == 1280.0 and sim.races == []


def test_record_stream_keeps_memory_from_reuse_until_the_other_stream_is_done():
    for record in (True, False):
        with simulated_cuda(seed=0, races="record") as sim:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                x = torch.ones(256, device="cuda")
            torch.cuda.current_stream().wait_stream(side)
            y = x * 2  # the default stream reads side's memory
            if record:
                x.record_stream(torch.cuda.current_stream())
            address = x.data_ptr()
            del x
            with torch.cuda.stream(side):
                z = torch.full((256,), 5.0, device="cuda")
            assert (z.data_ptr() == address) != record
            assert (sim.races != []) != record  # without record_stream: write after read, reported
            if not record:
                assert "record_stream" in str(sim.races[0]) or sim.races[0].kind == "write after read"
            del y, z


@pytest.mark.parametrize("record", [False, True])
def test_memory_dropped_on_another_thread_while_a_side_stream_reads_it_is_free_at_the_drop(record):
    """The prefetcher's inputs already on the GPU: made on the default stream, read by a kernel
    queued on a side stream, dropped by another host thread before that kernel has run. The free is
    the drop, as for CUDA's caching allocator (queued work holds no reference): the default
    stream's next allocation, on this thread, takes the memory at once and its write races with
    the pending read; ``record_stream(side)`` before the drop keeps the memory out of reach."""
    with simulated_cuda(seed=0, races="record") as sim:
        side = torch.cuda.Stream()
        kept = [torch.ones(256, device="cuda")]
        address = kept[0].data_ptr()

        def read_and_drop():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                kept.append(kept[0] * 2)  # queued on the side stream: reads the ones
            if record:
                kept[0].record_stream(side)
            del kept[0]

        thread = threading.Thread(target=read_and_drop)
        thread.start()
        thread.join()
        assert side.query() is False  # the read has not run
        z = torch.full((256,), 5.0, device="cuda")
        assert (z.data_ptr() == address) != record
        assert [r.kind for r in sim.races] == ([] if record else ["write after read"])
        torch.cuda.current_stream().wait_stream(side)  # after the fill: the read runs after it
        assert kept[0].sum().item() == (512.0 if record else 2 * 1280.0)  # without: it read the 5s
        assert z.sum().item() == 1280.0


def test_a_pinned_block_freed_while_its_copy_is_pending_is_not_reused_before_it_is_done():
    with simulated_cuda(seed=0) as sim:
        host = pinned_batch(1.0, n=1024)
        x = host.to("cuda", non_blocking=True)
        address = host.data_ptr()
        del host
        again = torch.empty(1024, pin_memory=True)
        assert again.data_ptr() != address  # the copy out of the first block has not run
        torch.cuda.synchronize()  # now it has: the first block freed is the first one handed out again
        assert torch.empty(1024, pin_memory=True).data_ptr() == address
        assert x.sum().item() == 1024.0 and sim.races == []


# --- syncs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("read", ["item", "bool", "cpu", "tolist", "nonzero", "repr", "equal", "mask"])
def test_every_read_by_the_host_is_a_reported_sync(read):
    with simulated_cuda() as sim:
        x = torch.arange(4, device="cuda")
        {"item": lambda: x.sum().item(), "bool": lambda: bool(x[1] > 0), "cpu": lambda: x.cpu(),
         "tolist": lambda: x.tolist(), "nonzero": lambda: x.nonzero(), "repr": lambda: repr(x),
         "equal": lambda: torch.equal(x, x), "mask": lambda: x[x > 1]}[read]()
        assert len(sim.syncs) == 1
        torch.cuda.set_sync_debug_mode("error")
        with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
            x.sum().item()
        torch.cuda.set_sync_debug_mode(0)


def test_the_block_restores_torch_cuda_and_refuses_to_nest():
    empty, to, available = torch.empty, torch.Tensor.to, torch.cuda.is_available
    with pytest.raises(ZeroDivisionError), simulated_cuda():
        assert torch.cuda.is_available()
        x = torch.ones(2, device="cuda")
        raise ZeroDivisionError
    assert torch.empty is empty and torch.Tensor.to is to and torch.cuda.is_available is available
    with simulated_cuda(), pytest.raises(RuntimeError, match="already in place"), simulated_cuda():
        pass
    with pytest.raises(RuntimeError, match="outside simulated_cuda"):
        x + 1
    assert isinstance(x, SimTensor)


def test_to_of_a_device_tensor_to_its_own_device_is_the_tensor_itself():
    with simulated_cuda():
        x = torch.ones(2, device="cuda")
        assert x.to("cuda") is x and x.cuda() is x and x.to(torch.device("cuda", 0)) is x
        assert x.to("cuda", torch.float16).dtype == torch.float16


def test_python_scalars_of_where_keep_their_values():
    with simulated_cuda() as sim:
        x = torch.tensor([-1.0, 2.0], device="cuda")
        assert torch.where(x > 0, x, 0.5).cpu().tolist() == [0.5, 2.0]
        assert x.where(x < 0, 7).cpu().tolist() == [-1.0, 7.0]
        assert sim.stats["eager"] == 0


def test_out_arguments_that_resize_are_resized():
    with simulated_cuda():
        assert torch.arange(5, device="cuda").tolist() == [0, 1, 2, 3, 4]
        assert torch.linspace(0, 1, 3, device="cuda").tolist() == [0.0, 0.5, 1.0]


def test_the_nominal_timeline_puts_a_side_stream_copy_under_the_default_streams_kernel():
    with simulated_cuda() as sim:
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            pinned_batch(1.0, n=1 << 20).to("cuda", non_blocking=True)  # 4 MB at the nominal 25 GB/s
        sim.busy(0.5)
    copy, step = sim.timeline()
    assert copy.resource == "side stream 1" and step.resource == "default stream"
    assert copy.start < step.end and step.start < copy.end  # they overlap


def test_the_readmes_simulator_example_runs(tmp_path, monkeypatch, capsys):
    import pathlib
    import re

    from gpufeed.data.memmap import build_memmap
    from gpufeed.measure.synth import synth_folder

    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme.split("## Testing CUDA without a GPU", 1)[1], re.S).group(1)
    src = synth_folder(tmp_path / "jpeg", n=6, size=(48, 40), classes=2, progress=False).path
    build_memmap(src, tmp_path / "my_memmap", size=(32, 32), progress=False)
    for old, new in {"batch_size=64": "batch_size=3", "crop=224": "crop=24"}.items():
        assert old in code, f"the README example no longer has {old!r}: update this test"
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "tensor([" in printed and "host syncs" in printed


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_nothing_measured_under_the_simulator_claims_a_gpu():
    """The machine record is cached once a process; read first inside the block it would record the
    simulated device as this machine's GPU (and fail: torch has no properties for it)."""
    from gpufeed.measure import machine

    machine._static_info.cache_clear()
    with simulated_cuda():
        info = machine.machine_info()
    assert info["gpu"] is None and info["gpu_count"] == 0
