"""gpufeed.course.lesson07.collate: the worker-side DeviceCollate, DataParallel's split and DDP's move of nests (lesson 07)."""

import pickle

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils.collate import default_collate

from gpufeed.course.lesson07.collate import (
    DeviceCollate,
    dataparallel_split,
    ddp_move,
    without_persistent_workers,
    worker_cuda_cost,
)
from gpufeed.data.movers import DetectionDataset, detection_collate, equal, leaves, pin, to_device


def nest_samples(n=4):
    return [{"image": torch.full((3, 2, 2), i, dtype=torch.uint8), "meta": (torch.tensor([i, -i]), f"id{i}")}
            for i in range(n)]


def test_device_collate_pickles_by_reference_and_collates_like_default_collate():
    c = pickle.loads(pickle.dumps(DeviceCollate("cuda:1", non_blocking=False)))  # what a spawn worker receives
    assert (c.device, c.non_blocking) == ("cuda:1", False)
    assert b"gpufeed.course.lesson07.collate" in pickle.dumps(DeviceCollate())  # importable by module and name
    samples = nest_samples()
    assert equal(DeviceCollate("cpu")(samples), default_collate(samples))


def test_device_collate_in_spawned_workers_gives_the_same_batches():
    data = TensorDataset(torch.arange(12).view(6, 2), torch.arange(6))
    plain = list(DataLoader(data, batch_size=2))
    spawned = list(DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context="spawn",
                              persistent_workers=True, collate_fn=DeviceCollate("cpu")))
    assert len(plain) == len(spawned) and all(equal(a, b) for a, b in zip(plain, spawned))


def test_dataparallel_split_cuts_every_tensor_in_the_nest_along_dim_0():
    images = torch.zeros(4, 3, 8, 8)
    targets = [{"boxes": torch.rand(k, 4), "labels": torch.arange(k)} for k in (2, 3, 4, 5)]
    parts = dataparallel_split({"images": images, "targets": targets}, 2)
    assert [p["images"].shape[0] for p in parts] == [2, 2]
    for i, t in enumerate(targets):  # each replica gets every image's targets, each cut in two: not 2 images' worth
        assert all(len(p["targets"]) == 4 for p in parts)
        assert torch.equal(torch.cat([p["targets"][i]["boxes"] for p in parts]), t["boxes"])
    one_box = dataparallel_split({"images": images, "targets": [{"boxes": torch.rand(1, 4)}] * 4}, 2)
    assert len(one_box) == 1  # a tensor cut into fewer pieces than replicas: zip keeps only that many
    ds = DetectionDataset(4, size=8)
    with pytest.raises(RuntimeError, match="1-dimensional"):
        dataparallel_split(detection_collate([ds[i] for i in range(4)]), 2)  # its 0-d image_id tensors


def test_ddp_move_keeps_the_nest_whole():
    ds = DetectionDataset(3, size=8)
    batch = detection_collate([ds[i] for i in range(3)])
    moved = ddp_move(batch, "cpu")
    assert equal(moved, batch) and len(leaves(moved)) == len(leaves(batch))


def test_ddp_move_to_a_bare_cuda_device_keeps_what_is_already_there(on_cuda):
    """Lesson 07 moves a pinned batch to ``S.device`` (``torch.device("cuda")``, no index), then lets
    DDP's move see it: torch took ``cuda:0 != cuda`` for a copy to make on a side stream and failed in
    ``_get_stream`` (TypeError: list indices must be integers or slices, not NoneType) on the H100."""
    ds = DetectionDataset(3, size=8)
    batch = detection_collate([ds[i] for i in range(3)])
    on_device = ddp_move(batch, "cuda")  # CPU tensors: a plain .to()
    assert all(t.device.type == "cuda" for t in leaves(on_device)) and equal(on_device, batch)
    again = ddp_move(on_device, torch.device("cuda"))
    assert all(a is b for a, b in zip(leaves(again), leaves(on_device)))  # already there: nothing moved


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the workers' copies need one")
def test_device_collate_delivers_cuda_batches_from_spawned_workers():
    data = TensorDataset(torch.arange(24, dtype=torch.float32).view(12, 2), torch.arange(12))
    loader = DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context="spawn", persistent_workers=True,
                        collate_fn=DeviceCollate("cuda"))
    got = list(loader)
    assert all(t.is_cuda for b in got for t in b)
    assert torch.equal(torch.cat([b[0].cpu() for b in got]), data.tensors[0])
    cost = worker_cuda_cost(data, batch_size=4, num_workers=2, epochs=1)
    assert set(cost) == {"main process", "in the workers"} and all(len(c["epoch_s"]) == 1 for c in cost.values())


def test_worker_cuda_cost_says_it_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        worker_cuda_cost(TensorDataset(torch.zeros(2)), batch_size=1, num_workers=1)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the workers' copies need one")
def test_without_persistent_workers_reports_each_epochs_start_and_what_the_workers_printed():
    data = TensorDataset(torch.arange(24, dtype=torch.float32).view(12, 2), torch.arange(12))
    got = without_persistent_workers(data, batch_size=4, num_workers=2, epochs=2)
    assert len(got["first_batch_s"]) == 2 and got["producer_warnings"] >= 0
    assert isinstance(got["held_batches_intact"], bool) and isinstance(got["stderr_tail"], str)


def test_without_persistent_workers_says_it_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        without_persistent_workers(TensorDataset(torch.zeros(2)), batch_size=1, num_workers=1)


def test_device_collate_makes_a_tensorclass_batch_in_spawned_workers():
    data = TensorDataset(torch.arange(24, dtype=torch.float32).view(6, 2, 2), torch.arange(6))
    got = list(DataLoader(data, batch_size=3, num_workers=1, multiprocessing_context="spawn",
                          collate_fn=DeviceCollate("cpu", tensorclass=True)))
    assert [type(b).__name__ for b in got] == ["ImageData", "ImageData"]
    assert torch.equal(torch.cat([b.images for b in got]), data.tensors[0]) and got[1].targets.tolist() == [3, 4, 5]


@pytest.mark.simcuda
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_device_collate_under_the_simulator_hands_over_batches_whose_copies_are_done(seed):
    """DeviceCollate in the main process (``num_workers=0``) on the CUDA-ordering simulator. In a
    worker the batch is read by another process on another stream, which nothing orders after the
    worker's copies: so the collate waits for its stream before handing the batch over. Read here on
    a fresh side stream with no wait, a batch whose copies were not waited for is a race."""
    from gpufeed.simcuda import CudaRaceError, simulated_cuda

    samples = nest_samples()
    images = [(torch.full((3, 2, 2), i, dtype=torch.uint8), i) for i in range(4)]

    def read_on_another_stream(batch):  # as the main process would: nothing orders it after the copies
        with torch.cuda.stream(torch.cuda.Stream()):
            return [(t * 1).cpu() for t in leaves(batch)]

    with simulated_cuda(seed) as sim:
        batch = DeviceCollate("cuda")(samples)
        assert all(t.is_cuda for t in leaves(batch)) and list(batch["meta"][1]) == ["id0", "id1", "id2", "id3"]
        assert len(sim.syncs) == 1 and "synchronize" in sim.syncs[0]  # the collate's one wait for its stream
        assert all(torch.equal(a, b) for a, b in zip(read_on_another_stream(batch), leaves(default_collate(samples))))
        classy = DeviceCollate("cuda", tensorclass=True)(images)
        assert type(classy).__name__ == "ImageData" and classy.images.is_cuda and classy.targets.is_cuda
        got = read_on_another_stream(classy)
        assert torch.equal(got[0], default_collate(images)[0]) and got[1].tolist() == [0, 1, 2, 3]
        loader = DataLoader(TensorDataset(torch.arange(12).view(6, 2), torch.arange(6)), batch_size=2,
                            collate_fn=DeviceCollate("cuda"))
        assert torch.cat([read_on_another_stream(b)[0] for b in loader]).equal(torch.arange(12).view(6, 2))
        unwaited = to_device(pin(default_collate(samples)), "cuda", non_blocking=True)  # no synchronize
        with pytest.raises(CudaRaceError):
            read_on_another_stream(unwaited)
