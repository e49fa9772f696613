"""Each peer loader, where installed, makes normalised float32 crops of the tiny dataset.

With ``GPUFEED_REQUIRE_PEERS=1`` (``make test-peers``, CI) a missing peer fails instead of skipping."""

import os

import pytest
import torch
from test_pipeline_bench import pipelines_in  # tests/test_pipeline_bench.py

from gpufeed.measure import peers, pipelines


def need(name: str) -> None:
    if not peers.available()[name]:
        if os.environ.get("GPUFEED_REQUIRE_PEERS") == "1":
            pytest.fail(f"{name} is not installed, and GPUFEED_REQUIRE_PEERS=1: run make peers-deps")
        pytest.skip(f"{name} not installed (make peers-deps)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    w = pipelines.TINY
    return pipelines.prepare(w, tmp_path_factory.mktemp("peers")), w


@pytest.mark.parametrize("name", sorted(peers.PEERS))
def test_peer_epoch_in_its_own_process(tiny, name):
    need(name)
    data, w = tiny
    logged = []
    (m,) = peers.measure_all(data, w, threads=1, repeats=1, names=[name], log=logged.append)
    assert m.params["pipeline"] == name and m.items == w.n // w.batch * w.batch and m.samples[0] > 0


@pytest.mark.parametrize("name", sorted(peers.PEERS))
def test_peer_epoch_makes_every_full_batch(tiny, name):
    need(name)
    data, w = tiny
    epoch = peers.make_epoch(name, data, w, threads=1)
    assert epoch() == w.n // w.batch * w.batch


def test_unknown_peer_is_one_clear_error(tiny):
    data, w = tiny
    with pytest.raises(ValueError, match="unknown peer 'nope'"):
        peers.make_epoch("nope", data, w, 1)


def test_normalize_matches_the_course():
    x = torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
    assert peers._normalize(x).dtype == torch.float32 and round(peers._normalize(x)[0, 0, 0, 0].item(), 3) == 2.249


def test_bench_peers_end_to_end_from_the_command_line(tmp_path):
    """`gpufeed bench --peers`: every installed peer gets a loader row beside the course's, as a
    fraction of both ceilings and with its peak memory, in results.json and the markdown table."""
    import json

    from gpufeed.cli import main
    from gpufeed.measure import bench_report

    installed = sorted(n for n, ok in peers.available().items() if ok)
    for name in sorted(peers.PEERS):
        if name not in installed and os.environ.get("GPUFEED_REQUIRE_PEERS") == "1":
            need(name)  # fails: CI must run this with every peer
    assert main(["bench", "--size", "tiny", "--device", "cpu", "--repeats", "1", "--no-dali", "--peers",
                 "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["peers"] == installed
    loaders = {r["pipeline"]: r for r in doc["records"] if r["mode"] == "loader"}
    assert set(installed) | {"naive", "tuned", "course"} <= set(loaders)
    for name in [*installed, "course"]:
        row = loaders[name]
        assert row["images_per_s"] > 0 and row["fraction_of_memcpy_stream"] > 0 and row["fraction_of_batch_fetch"] > 0
        assert row["peak_pss_mb"] > 0 and row["cores_busy"] > 0
    table = bench_report.markdown(doc)
    assert set(installed) <= set(pipelines_in(table))
