"""gpufeed.course.lesson07.devicefiles: a GPU machine's file on any machine, and torch.load's two ways (lesson 07)."""

import pytest
import torch

from gpufeed.course.lesson07.devicefiles import load_ways, save_as_on
from gpufeed.data.movers import equal


def nest():
    return {"images": torch.randint(0, 256, (3, 3, 8, 8), dtype=torch.uint8), "targets": [torch.arange(3)]}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the file of a GPU machine read where there is none")
def test_a_gpu_machines_file_loads_here_only_with_map_location(tmp_path):
    data = nest()
    path = save_as_on(data, tmp_path / "on-cuda.pt", "cuda:0")
    with pytest.raises(RuntimeError, match="map_location"):
        torch.load(path, weights_only=True)
    assert equal(torch.load(path, map_location="cpu", weights_only=True), data)
    assert equal(torch.load(path, map_location={"cuda:0": "cpu"}, weights_only=True), data)
    plain = tmp_path / "plain.pt"  # outside save_as_on, torch.save records the CPU again
    torch.save(data, plain)
    assert equal(torch.load(plain, weights_only=True), data)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_file_is_saved_from_the_gpu(tmp_path):
    path = save_as_on(nest(), tmp_path / "on-cuda.pt", "cuda:0")
    assert torch.load(path, weights_only=True)["images"].device == torch.device("cuda", 0)
    (by_map, then_move), same = load_ways(path, "cuda", repeats=2)
    assert same  # the file's tensors come back on cuda:0 already: the move hands back the same ones
    assert by_map.median > 0 and then_move.median > 0 and by_map.params["device"] == "cuda"


def test_only_the_cpu_and_cuda_devices_are_written(tmp_path):
    with pytest.raises(ValueError, match="only 'cpu' and 'cuda:N'"):
        save_as_on(nest(), tmp_path / "x.pt", "meta")


def test_load_ways_checks_then_times_both_in_turns(tmp_path):
    path = tmp_path / "shard.pt"
    torch.save(nest(), path)
    (by_map, then_move), same = load_ways(path, "cpu", repeats=3)
    assert same  # on the CPU, .to("cpu") hands back the very tensors
    assert len(by_map.samples) == len(then_move.samples) == 3
    assert by_map.nbytes == then_move.nbytes == path.stat().st_size and by_map.params["device"] == "cpu"
