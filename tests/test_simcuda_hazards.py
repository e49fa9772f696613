"""Planted bugs the CUDA-ordering simulator must catch, and their correct versions, which it must
pass under 20 schedules (it does not cry wolf). Lesson 08 plays three of them
(gpufeed.course.lesson08.hazards); the fourth and fifth are the other direction of non_blocking and a
hidden sync."""

import math

import pytest
import torch

from gpufeed.course.lesson08 import hazards
from gpufeed.simcuda import CudaRaceError, simulated_cuda

pytestmark = pytest.mark.simcuda
SEEDS = range(20)


def side_stream_copy(wait: bool) -> float:
    """A copy issued on a side stream, used on the default stream (with or without a wait)."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.full((64,), 3.0).pin_memory().to("cuda", non_blocking=True)
    if wait:
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
    return (x * 2).sum().item()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_side_stream_copy_used_without_a_wait(seed):
    with simulated_cuda(seed) as sim, pytest.raises(CudaRaceError, match="read after write"):
        side_stream_copy(wait=False)
    with simulated_cuda(seed) as sim:
        assert side_stream_copy(wait=True) == 384.0 and sim.races == []


def ring_of_one(wait: bool) -> list[float]:
    buffer = torch.empty(64, pin_memory=True)
    sums, copied = [], None
    for k in range(4):
        if wait and copied is not None:
            copied.synchronize()
        buffer.fill_(float(k))  # the host refills the buffer for the next batch
        sums.append(buffer.to("cuda", non_blocking=True).sum())
        copied = torch.cuda.Event()
        copied.record()
    return torch.stack(sums).cpu().tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_pinned_buffer_overwritten_while_its_copy_is_in_flight(seed):
    with simulated_cuda(seed, races="record") as sim:
        ring_of_one(wait=False)
        races = list(sim.races)
    assert races and all(r.kind == "write after read" and r.later.actor == "host" for r in races)
    with simulated_cuda(seed) as sim:
        assert ring_of_one(wait=True) == [0.0, 64.0, 128.0, 192.0] and sim.races == []


def dropped_without_record_stream(record: bool) -> list[float]:
    """Batches made on a side stream and used on the default one, dropped right after use."""
    side, current = torch.cuda.Stream(), torch.cuda.current_stream()
    sums = []
    for k in range(4):
        with torch.cuda.stream(side):
            x = torch.full((256,), float(k)).pin_memory().to("cuda", non_blocking=True)
        current.wait_stream(side)
        if record:
            x.record_stream(current)
        sums.append(x.sum())  # queued on the default stream
        del x  # freed on the host: the side stream's next allocation may take its memory
    return torch.stack(sums).cpu().tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_side_stream_tensor_freed_without_record_stream_and_reused(seed):
    with simulated_cuda(seed) as sim, pytest.raises(CudaRaceError, match="write after read.*record_stream"):
        dropped_without_record_stream(record=False)
    with simulated_cuda(seed) as sim:
        assert dropped_without_record_stream(record=True) == [0.0, 256.0, 512.0, 768.0] and sim.races == []


def read_back(sync: bool) -> list[float]:
    y = torch.arange(4, dtype=torch.float32, device="cuda") * 2
    host = y.to("cpu", non_blocking=True)  # into pinned memory, later
    if sync:
        done = torch.cuda.Event()
        done.record()
        done.synchronize()
    return host.tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_device_to_host_result_read_before_a_sync(seed):
    with simulated_cuda(seed):
        assert all(math.isnan(v) for v in read_back(sync=False))  # poison under every schedule
    with simulated_cuda(seed) as sim:
        assert read_back(sync=True) == [0.0, 2.0, 4.0, 6.0] and sim.syncs == []


def train(batches, check_loss: bool) -> None:
    for x in batches:
        loss = (x.to("cuda", non_blocking=True) * 2).mean()
        if check_loss and loss > 1e6:  # bool() of a device tensor: the host waits, every batch
            raise RuntimeError("diverged")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_hidden_sync_in_every_batch(seed):
    with simulated_cuda(seed) as sim:
        batches = [torch.full((32,), float(k)).pin_memory() for k in range(5)]
        train(batches, check_loss=True)
        assert len(sim.syncs) == len(batches)
        torch.cuda.set_sync_debug_mode("error")
        with pytest.raises(RuntimeError, match="synchronizing CUDA operation"):
            train(batches, check_loss=True)
    with simulated_cuda(seed) as sim:
        batches = [torch.full((32,), float(k)).pin_memory() for k in range(5)]
        torch.cuda.set_sync_debug_mode("error")
        train(batches, check_loss=False)
        assert sim.syncs == []


@pytest.mark.parametrize("hazard", hazards.HAZARDS)
def test_lesson_08s_hazards_are_reported_under_every_schedule_and_give_a_wrong_batch_under_one(hazard):
    plays = [hazards.play(hazard, seed) for seed in range(4)]
    assert all(p.races > 0 for p in plays)
    assert any(p.held != [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] for p in plays)
    assert all(hazards.play("correct", seed).races == 0 for seed in range(4))


def test_the_prefetchers_copies_run_under_the_steps_on_the_nominal_timeline():
    with_prefetch, per_batch = hazards.overlap(n=4, batch_mb=24, step_ms=1.0)
    _, without = hazards.overlap(n=4, batch_mb=24, step_ms=1.0, prefetch=False)
    copies = [i for i in with_prefetch if i.stage == "copy"]
    steps = [i for i in with_prefetch if i.resource == "default stream"]
    assert {i.resource for i in copies} == {"side stream 1"}
    assert any(c.start < s.end and s.start < c.end for c in copies for s in steps)  # a copy under a step
    assert per_batch < without
