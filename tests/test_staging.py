import errno
import os

import pytest

from gpufeed.data import staging


def test_the_folder_appears_only_when_the_block_ends(tmp_path):
    out = tmp_path / "d"
    with staging.staged(out, ValueError) as tmp:
        assert tmp.name == f".d.partial-{staging.host()}-{os.getpid()}" and tmp.parent == tmp_path
        (tmp / "x").write_text("1")
        assert not out.exists()
    assert (out / "x").read_text() == "1"
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


def test_an_existing_folder_is_replaced_whole(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "old").write_text("old")
    with staging.staged(out, ValueError) as tmp:
        (tmp / "new").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["d"]  # no trash left behind


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_any_failure_keeps_nothing(tmp_path, exc):
    with pytest.raises(type(exc)), staging.staged(tmp_path / "d", ValueError) as tmp:
        (tmp / "x").write_text("1")
        raise exc
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_becomes_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="filled up; nothing was kept"), staging.staged(tmp_path / "d", ValueError):
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(ValueError, match="cannot write to .*choose another DST"), \
            staging.staged(tmp_path / "d", ValueError, flag="DST"):
        raise OSError(errno.EACCES, "Permission denied")
    assert list(tmp_path.iterdir()) == []


def test_stale_staging_of_dead_runs_only(tmp_path):
    live = tmp_path / f".d.partial-{os.getpid()}"
    dead = tmp_path / ".d.partial-999999999"
    odd = tmp_path / ".d.partial-notapid"
    for p in (live, dead, odd):
        p.mkdir()
    assert sorted(staging.stale_staging(tmp_path / "d")) == sorted([dead, odd])
    staging.remove_stale_staging(tmp_path / "d")
    assert live.exists() and not dead.exists() and not odd.exists()


def test_space_and_parent_checks(tmp_path, monkeypatch):
    staging.check_space(10, 100, tmp_path, ValueError, "shrink it")
    with pytest.raises(ValueError, match=r"needs about 2 MB, 0 MB are free; free some space, or shrink it"):
        staging.check_space(2_000_000, 100, tmp_path, ValueError, "shrink it")
    staging.prepare_parent(tmp_path / "a" / "b" / "out", ValueError, "--out")
    assert (tmp_path / "a" / "b").is_dir()
    monkeypatch.setattr(staging.os, "access", lambda *a: False)
    with pytest.raises(ValueError, match="permission denied; choose another --out"):
        staging.prepare_parent(tmp_path / "out", ValueError, "--out")
    assert staging.free_bytes(tmp_path) > 0


def test_another_hosts_staging_folder_is_never_judged_by_a_local_pid(tmp_path):
    """Issue 26, defect 8: on storage shared between machines, a pid of another host says nothing
    here; its staging folder (named with its host) is left alone. Older names (no host) and this
    host's are judged by the pid as before."""
    here, pid = staging.host(), 999999999
    theirs = tmp_path / f".d.partial-other-node-7-{pid}"
    mine = tmp_path / f".d.partial-{here}-{pid}"
    legacy = tmp_path / f".d.partial-{pid}"
    live = staging.staging_path(tmp_path / "d")
    for p in (theirs, mine, legacy, live):
        p.mkdir()
    assert sorted(staging.stale_staging(tmp_path / "d")) == sorted([mine, legacy])
    assert "-" in here or here  # a host name with dashes still parses (other-node-7 above)


def _build(src, dst, barrier, out):
    from gpufeed.data.memmap import build_memmap

    barrier.wait(60)  # both start the build at once
    out.put(build_memmap(src, dst, (32, 32), reuse=True, progress=False).reused)


def test_ranks_building_one_memmap_at_once_decode_it_once(tmp_path):
    """Issue 26, defect 8: two processes (two ranks) call build_memmap(..., reuse=True) on one
    destination at the same moment: a lock beside it lets one decode, the other reuses its result."""
    import multiprocessing

    from gpufeed.measure.synth import synth_folder

    src = synth_folder(tmp_path / "jpeg", n=60, size=(64, 48), classes=3, progress=False).path
    # Two fresh processes, as two ranks are. A fork server imports torch and tensordict once (8 s
    # here) and forks both from it; spawn made each import them.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["gpufeed.data.memmap"])
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_build, args=(src, tmp_path / "mm", barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    reused = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    assert reused == [False, True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jpeg", "mm"]  # no staging folder, no lock left
