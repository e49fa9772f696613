import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from gpufeed.data import staging
from gpufeed.measure import synth
from gpufeed.measure.synth import SynthError, synth_folder

CLI = [sys.executable, "-m", "gpufeed", "data", "synth"]


def digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_imagefolder_layout_sizes_and_distinct_images(tmp_path):
    r = synth_folder(tmp_path / "d", n=12, size=(96, 64), quality=85, classes=3, progress=False)
    files = sorted((tmp_path / "d").rglob("*.jpg"))
    assert len(files) == 12 and r.n == 12 and r.total_bytes == sum(f.stat().st_size for f in files)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["class_00", "class_01", "class_02", synth.MANIFEST]
    for f in files:
        with Image.open(f) as im:
            assert im.size == (96, 64) and im.mode == "RGB" and im.format == "JPEG"
    assert len({hashlib.sha256(f.read_bytes()).digest() for f in files}) == 12  # all distinct


def test_same_seed_same_bytes_whatever_the_workers(tmp_path):
    synth_folder(tmp_path / "a", n=10, size=(64, 48), seed=7, classes=2, progress=False)
    synth_folder(tmp_path / "b", n=10, size=(64, 48), seed=7, classes=2, progress=False, workers=2)
    synth_folder(tmp_path / "c", n=10, size=(64, 48), seed=8, classes=2, progress=False)
    assert digests(tmp_path / "a") == digests(tmp_path / "b")
    assert digests(tmp_path / "a") != digests(tmp_path / "c")


def test_cli_twice_with_the_same_seed_gives_identical_files(tmp_path):
    args = ["--n", "64", "--size", "640x480", "--quality", "90", "--no-progress"]
    for name in ("one", "two"):
        r = subprocess.run([*CLI, *args, "--out", str(tmp_path / name)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "64 images" in r.stdout
    assert digests(tmp_path / "one") == digests(tmp_path / "two")
    again = subprocess.run([*CLI, *args, "--out", str(tmp_path / "one")], capture_output=True, text=True)
    assert again.returncode == 0 and "already there" in again.stdout


@pytest.mark.parametrize("args, message", [
    (["--size", "0x0"], "--size: width must be between"),
    (["--size", "big"], "--size must look like WIDTHxHEIGHT"),
    (["--quality", "150"], "--quality must be a JPEG quality from 1 to 100"),
    (["--n", "-1"], "--n must be a whole number of images, at least 1"),
    (["--n", "lots"], "argument --n: invalid int value"),
    (["--classes", "0"], "--classes must be between 1"),
])
def test_bad_arguments_give_one_clear_line_and_leave_nothing(tmp_path, args, message):
    base = {"--n": "4", "--size": "64x48", "--quality": "90"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    cmd = [*CLI, *[x for kv in base.items() for x in kv], "--out", str(tmp_path / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2
    assert message in r.stderr and r.stderr.startswith("error: ")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_out_that_is_a_file(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("keep me")
    r = subprocess.run([*CLI, "--n", "2", "--size", "64x48", "--out", str(target)], capture_output=True, text=True)
    assert r.returncode == 2 and "is a file; give a folder path" in r.stderr
    assert target.read_text() == "keep me"


def test_unwritable_destination(tmp_path):
    # /proc refuses new folders even to root, unlike a chmod-ed folder.
    r = subprocess.run([*CLI, "--n", "2", "--size", "64x48", "--out", "/proc/gpufeed-test/out"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: cannot") and "choose another --out" in r.stderr


def test_readonly_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(synth.os, "access", lambda *a: False)
    with pytest.raises(SynthError, match="permission denied"):
        synth_folder(tmp_path / "d", n=2, size=(64, 48), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_not_enough_disk_space(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "free_bytes", lambda path: 10_000)
    with pytest.raises(SynthError, match="not enough disk space.*MB are free"):
        synth_folder(tmp_path / "d", n=100, size=(640, 480), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_midway_keeps_nothing(tmp_path, monkeypatch):
    real = synth._write_range

    def fill_up(spec, staging, start, stop):
        if start > 0:
            raise OSError(28, "No space left on device")
        return real(spec, staging, start, stop)

    monkeypatch.setattr(synth, "_write_range", fill_up)
    with pytest.raises(SynthError, match="filled up; nothing was kept"):
        synth_folder(tmp_path / "d", n=100, size=(32, 32), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_existing_folders_are_protected(tmp_path):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "mine.jpg").write_bytes(b"precious")
    with pytest.raises(SynthError, match="files that gpufeed did not write"):
        synth_folder(other, n=2, size=(64, 48), progress=False)
    assert (other / "mine.jpg").read_bytes() == b"precious"

    synth_folder(tmp_path / "d", n=2, size=(64, 48), classes=1, progress=False)
    with pytest.raises(SynthError, match="different generated dataset; pass --overwrite"):
        synth_folder(tmp_path / "d", n=3, size=(64, 48), classes=1, progress=False)
    r = synth_folder(tmp_path / "d", n=3, size=(64, 48), classes=1, progress=False, overwrite=True)
    assert not r.reused and len(list((tmp_path / "d").rglob("*.jpg"))) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "photos"]  # no staging or old folder left

    (tmp_path / "empty").mkdir()
    assert synth_folder(tmp_path / "empty", n=2, size=(64, 48), classes=1, progress=False).n == 2


def test_killed_run_leaves_nothing_that_looks_complete(tmp_path):
    out = tmp_path / "big"
    cmd = [*CLI, "--n", "400", "--size", "320x240", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    staging = None
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until it has written some images, then kill it hard
        partial = list(tmp_path.glob(".big.partial-*"))
        if partial and len(list(partial[0].rglob("*.jpg"))) >= 5:
            staging = partial[0]
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert staging is not None, "the generator never started writing"
    assert not out.exists()  # the destination appears only when complete
    assert synth.read_manifest(staging) is None
    # The next run removes the dead run's leftovers and writes a complete dataset.
    r = synth_folder(out, n=20, size=(64, 48), progress=False)
    assert not r.reused and synth.read_manifest(out)["spec"]["n"] == 20
    assert [p.name for p in tmp_path.iterdir()] == ["big"]


def test_interrupt_cleans_up(tmp_path, monkeypatch):
    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth, "_write_range", interrupted)
    with pytest.raises(KeyboardInterrupt):
        synth_folder(tmp_path / "d", n=4, size=(64, 48), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_running_generators_staging_folder_is_left_alone(tmp_path):
    live = tmp_path / f".d.partial-{os.getpid()}"  # this process is alive
    live.mkdir()
    dead = tmp_path / ".d.partial-999999999"
    dead.mkdir()
    staging.remove_stale_staging(tmp_path / "d")
    assert live.exists() and not dead.exists()


def test_labels_follow_photos():
    spec = synth.SynthSpec(n=10, width=32, height=32, classes=2)
    assert synth.relative_path(spec, 3) == "class_01/000003.jpg"
