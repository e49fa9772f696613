"""Each peer loader, where installed, makes normalised float32 crops of the tiny dataset.

With ``GPUFEED_REQUIRE_PEERS=1`` (``make test-peers``, CI) a missing peer fails instead of skipping."""

import os

import pytest
import torch

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
