import json
import multiprocessing
import os
import pickle
import shutil
import signal

import pytest
import torch

from gpufeed.cli import main
from gpufeed.data import folder, memmap
from gpufeed.data.folder import ImageFolderDataset
from gpufeed.data.jpeg import decode_pil
from gpufeed.data.memmap import ImageData, MemmapError, build_memmap, load_memmap, read_manifest
from gpufeed.data.progress_bar import show_progress
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return synth_folder(tmp_path_factory.mktemp("memmap") / "jpeg", n=24, size=(64, 48), classes=3,
                        progress=False).path


def assert_same_as_folder(data, ds, rows=None):
    rows = range(len(ds)) if rows is None else rows
    assert len(data) == len(rows)
    for k, i in enumerate(rows):
        image, target = ds[i]
        assert torch.equal(data.images[k], image), f"row {k} (file {ds.samples[i][0]}) differs"
        assert data.targets[k].item() == target


@pytest.mark.parametrize("size, workers", [((32, 32), 1), ((32, 32), 2), ((64, 48), 1)])
def test_round_trip_is_exact(tmp_path, src, size, workers):
    r = build_memmap(src, tmp_path / "mm", size, workers=workers, progress=False, batch_size=5)
    data = load_memmap(tmp_path / "mm")
    assert isinstance(data, ImageData) and r.n == 24 and not r.reused and r.skipped == []
    assert data.images.dtype == torch.uint8 and data.images.shape == (24, 3, size[1], size[0])
    assert data.targets.dtype == torch.int64
    assert_same_as_folder(data, ImageFolderDataset(src, size))
    if size == (64, 48):  # the native size: the very pixels a JPEG decoder gives, no resampling
        first = sorted(src.rglob("*.jpg"))[0]
        assert torch.equal(data.images[0], decode_pil(first.read_bytes()))
    m = read_manifest(tmp_path / "mm")
    assert m["count"] == 24 and m["images"] == {"shape": [24, 3, size[1], size[0]], "dtype": "uint8"}
    assert m["classes"] == ["class_00", "class_01", "class_02"] and m["source"] == str(src)
    assert m["version"] == memmap.FORMAT_VERSION and m["bytes"] == memmap.dataset_bytes(24, size)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mm"]


def test_memmap_pickles_by_file_name_not_by_content(tmp_path, src):
    build_memmap(src, tmp_path / "mm", (32, 32), progress=False)
    data = load_memmap(tmp_path / "mm")
    blob = pickle.dumps(data)
    assert len(blob) < 10_000  # DataLoader workers map the same file instead of copying pixels
    again = pickle.loads(blob)
    assert torch.equal(again.images, data.images) and torch.equal(again.targets, data.targets)


def test_disk_space_is_checked_before_writing(tmp_path, src, monkeypatch):
    monkeypatch.setattr(memmap, "free_bytes", lambda path: 1000)
    with pytest.raises(MemmapError, match="not enough disk space.*choose a smaller --size"):
        build_memmap(src, tmp_path / "mm", (224, 224), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_destination_rules(tmp_path, src):
    build_memmap(src, tmp_path / "mm", (32, 32), progress=False)
    with pytest.raises(MemmapError, match="already holds a memmap dataset.*pass --overwrite"):
        build_memmap(src, tmp_path / "mm", (32, 32), progress=False)
    assert build_memmap(src, tmp_path / "mm", (32, 32), progress=False, reuse=True).reused
    r = build_memmap(src, tmp_path / "mm", (16, 16), progress=False, overwrite=True)
    assert not r.reused and load_memmap(tmp_path / "mm").images.shape[-1] == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mm"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    with pytest.raises(MemmapError, match="files that gpufeed did not write"):
        build_memmap(src, foreign, (32, 32), progress=False, overwrite=True)
    assert (foreign / "keep.txt").read_text() == "precious"
    with pytest.raises(MemmapError, match="is inside SRC"):
        build_memmap(src, src / "mm", (32, 32), progress=False)
    with pytest.raises(MemmapError, match="is a file"):
        build_memmap(src, foreign / "keep.txt", (32, 32), progress=False)
    with pytest.raises(MemmapError, match="--size must be between"):
        build_memmap(src, tmp_path / "x", (4, 4), progress=False)
    with pytest.raises(MemmapError, match="SRC: .* is not a folder"):
        build_memmap(tmp_path / "nothing", tmp_path / "x", progress=False)


@pytest.fixture
def with_bad(tmp_path, src):
    copy = tmp_path / "jpeg"
    shutil.copytree(src, copy)
    files = sorted(copy.rglob("*.jpg"))
    files[3].write_bytes(b"not a jpeg at all")
    files[10].write_bytes(files[10].read_bytes()[:300])  # truncated
    return copy, [files[3], files[10]]


def test_an_unreadable_image_stops_the_build_and_names_the_file(tmp_path, with_bad):
    copy, bad = with_bad
    with pytest.raises(MemmapError, match=f"cannot read image {bad[0]}.*--skip-bad"):
        build_memmap(copy, tmp_path / "mm", (32, 32), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jpeg"]


@pytest.mark.parametrize("workers", [1, 2])
def test_skip_bad_leaves_them_out_and_lists_them(tmp_path, with_bad, workers):
    copy, bad = with_bad
    r = build_memmap(copy, tmp_path / "mm", (32, 32), progress=False, skip_bad=True, batch_size=4, workers=workers)
    assert r.n == 22 and [s["path"] for s in r.skipped] == [str(p) for p in bad]
    data = load_memmap(tmp_path / "mm")
    ds = ImageFolderDataset(copy, (32, 32))
    good = [i for i, (p, _) in enumerate(ds.samples) if p not in {str(b) for b in bad}]
    assert_same_as_folder(data, ds, good)
    assert read_manifest(tmp_path / "mm")["count"] == 22 and len(read_manifest(tmp_path / "mm")["skipped"]) == 2
    assert sorted(p.name for p in (tmp_path / "mm").iterdir()) == ["data", memmap.MANIFEST]


def test_cli_skip_bad_reports_and_bad_args_are_one_line(tmp_path, with_bad, capsys):
    copy, bad = with_bad
    assert main(["data", "memmap", str(copy), str(tmp_path / "mm"), "--size", "32x32", "--skip-bad", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "22 images 32x32" in out and "skipped 2 unreadable image(s)" in out and str(bad[1]) in out
    for args, message in ((["--size", "big"], "--size must look like WIDTHxHEIGHT"),
                          (["--workers", "0"], "--workers must be 1 or more"),
                          ([], f"cannot read image {bad[0]}")):
        assert main(["data", "memmap", str(copy), str(tmp_path / "new"), "--no-progress", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def _build_then_die(src, dst):
    """Builds, and kills itself with SIGKILL (no clean-up code runs) after two batches were written."""
    real, seen = folder.load_image, []

    def load_then_die(path, size):
        seen.append(path)
        if len(seen) == 10:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, size)

    folder.load_image = load_then_die
    build_memmap(src, dst, (32, 32), progress=False, batch_size=4)


def test_a_killed_build_leaves_nothing_that_loads(tmp_path, src):
    dst = tmp_path / "mm"
    proc = multiprocessing.get_context("fork").Process(target=_build_then_die, args=(src, dst))
    proc.start()  # fork: the child has torch and tensordict loaded already
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert not dst.exists()
    (partial,) = tmp_path.glob(".mm.partial-*")
    assert (partial / memmap.DATA).is_dir() and read_manifest(partial) is None
    with pytest.raises(MemmapError, match=r"does not exist; \.mm\.partial-.*-\d+ beside it is an incomplete build"):
        load_memmap(dst)
    with pytest.raises(MemmapError, match="not a complete gpufeed memmap dataset.*no gpufeed-memmap.json"):
        load_memmap(partial)
    build_memmap(src, dst, (32, 32), progress=False)  # the next build removes the dead one's leftovers
    assert [p.name for p in tmp_path.iterdir()] == ["mm"] and len(load_memmap(dst)) == 24


def test_load_refuses_foreign_or_damaged_folders(tmp_path, src):
    with pytest.raises(MemmapError, match="does not exist; build it with"):
        load_memmap(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MemmapError, match="no gpufeed-memmap.json"):
        load_memmap(tmp_path / "empty")
    build_memmap(src, tmp_path / "mm", (32, 32), progress=False)
    manifest_path = tmp_path / "mm" / memmap.MANIFEST
    good = json.loads(manifest_path.read_text())
    for change, message in (({"version": 99}, "format version 99"),
                            ({"images": {"shape": [25, 3, 32, 32], "dtype": "uint8"}}, "is damaged"),
                            ({"format": "something-else"}, "is unreadable or not gpufeed's")):
        manifest_path.write_text(json.dumps({**good, **change}))
        with pytest.raises(MemmapError, match=message):
            load_memmap(tmp_path / "mm")
    manifest_path.write_text("{ not json")
    with pytest.raises(MemmapError, match="gpufeed-memmap.json is unreadable"):
        load_memmap(tmp_path / "mm")
    manifest_path.write_text(json.dumps(good))
    shutil.rmtree(tmp_path / "mm" / memmap.DATA)
    with pytest.raises(MemmapError, match="is damaged"):
        load_memmap(tmp_path / "mm")


@pytest.mark.parametrize("name", ["images", "targets"])
def test_a_truncated_file_is_refused_by_every_reader_and_left_as_it_was(tmp_path, src, name):
    """Issue 26, defect 2: tensordict maps a writable file shared and torch.from_file extends a short
    one with zeros, so a truncated dataset used to load as black images and come back full size.
    Every reader checks each file's size against the manifest first, names the file, and changes
    nothing on disk."""
    from gpufeed.data.arrays import MemmapDataset, open_arrays
    from gpufeed.data.image_loader import ImageLoader

    build_memmap(src, tmp_path / "mm", (32, 32), progress=False)
    (damaged,) = (tmp_path / "mm").rglob(f"{name}.memmap")
    before = damaged.read_bytes()[:100]
    os.truncate(damaged, 100)
    for read in (load_memmap, open_arrays, MemmapDataset, lambda p: ImageLoader(p, 4)):
        with pytest.raises(MemmapError, match=rf"{damaged.name}.* 100 bytes.*--overwrite") as info:
            read(tmp_path / "mm")
        assert str(damaged) in str(info.value) and "\n" not in str(info.value)
        assert damaged.stat().st_size == 100 and damaged.read_bytes() == before


@pytest.mark.parametrize("td_mode", [True, False], ids=["tensordict mode", "mapped again"])
def test_loading_maps_read_only_so_writes_never_reach_the_files(tmp_path, src, td_mode, monkeypatch):
    """Issue 26, defect 2, and issue 31: nothing of the user's is modified by loading, with a
    tensordict that maps a folder copy-on-write on request (0.15+) or one that maps it shared
    (0.10-0.14: ``_copy_on_write`` maps it again); ``writable=True`` asks for write-through."""
    if td_mode and not memmap._TD_HAS_MODE:
        pytest.skip("this tensordict has no mode; the other case covers it")
    monkeypatch.setattr(memmap, "_TD_HAS_MODE", td_mode)
    build_memmap(src, tmp_path / "mm", (32, 32), progress=False)
    (images,) = (tmp_path / "mm").rglob("images.memmap")
    (targets,) = (tmp_path / "mm").rglob("targets.memmap")
    before = images.read_bytes(), targets.read_bytes()
    data = load_memmap(tmp_path / "mm")
    data.images[0] = 7  # copy-on-write: this process sees it, the file does not
    data.targets[:] = 5
    assert data.images[0].eq(7).all() and data.targets.eq(5).all()
    assert load_memmap(tmp_path / "mm").images[0].ne(7).any()  # nor does another mapping
    del data
    assert (images.read_bytes(), targets.read_bytes()) == before
    data = load_memmap(tmp_path / "mm", writable=True)
    data.images[0] = 7  # a shared mapping: the page cache, so the file, has it
    del data
    assert images.read_bytes()[:3 * 32 * 32] == bytes([7]) * (3 * 32 * 32)


def test_skip_bad_cuts_the_files_in_place_without_a_second_copy(tmp_path, with_bad, monkeypatch):
    """Issue 26, defect 4: compaction used to write the good rows again into new files (a second
    copy that check_space never budgeted: SIGBUS on a nearly full disk). The good rows come first,
    so the files preallocated for the build are cut in place: the same files (inodes), no more."""
    copy, bad = with_bad
    reserved = {}
    real_reserve = memmap._reserve

    def reserve(prefix):
        real_reserve(prefix)
        reserved.update({f.name: f.stat().st_ino for f in prefix.rglob("*.memmap")})

    monkeypatch.setattr(memmap, "_reserve", reserve)
    r = build_memmap(copy, tmp_path / "mm", (32, 32), progress=False, skip_bad=True, batch_size=4)
    assert r.n == 22 and set(reserved) == {"images.memmap", "targets.memmap"}
    final = {f.name: f for f in (tmp_path / "mm").rglob("*.memmap")}
    assert {name: f.stat().st_ino for name, f in final.items()} == reserved
    assert final["images.memmap"].stat().st_size == 22 * 3 * 32 * 32 and final["targets.memmap"].stat().st_size == 22 * 8
    ds = ImageFolderDataset(copy, (32, 32))
    assert_same_as_folder(load_memmap(tmp_path / "mm"), ds, [i for i, (p, _) in enumerate(ds.samples)
                                                             if p not in {str(b) for b in bad}])


def test_the_progress_bar_shows_only_where_someone_watches(tmp_path, src, capfd, monkeypatch):
    """A bar on a terminal or in a notebook; none in a log (stderr not a terminal), under CI or
    with progress=False."""
    for name in ("CI", "GPUFEED_QUICK", "GPUFEED_MODE", "GPUFEED_PROGRESS", "PYTEST_CURRENT_TEST"):
        monkeypatch.delenv(name, raising=False)
    build_memmap(src, tmp_path / "a", (16, 16))  # pytest's stderr is not a terminal
    assert "img" not in capfd.readouterr().err
    assert show_progress(True) is False and show_progress(False) is False
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert show_progress(True) is True
    monkeypatch.setenv("CI", "1")
    assert show_progress(True) is False
