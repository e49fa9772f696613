"""The branch of a CUDA-only cell: measured on a GPU, else our committed reference, else a line."""
from gpufeed.course import gpucell
from gpufeed.measure import results
from gpufeed.measure.harness import Measurement, save

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "cpu": "Intel Xeon", "cores": 16, "torch": "2.11.0", "quick": False}


def test_with_cuda_it_measures_and_never_reads_a_reference(monkeypatch, capsys):
    monkeypatch.setattr(results, "reference", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
    assert gpucell.measured_or_reference("lesson99", lambda: {"s": 1.5}, "s", cuda=True, shows="x") == {"s": 1.5}
    assert capsys.readouterr().out == ""  # a measurement needs no provenance line: the setup cell names the GPU


def test_without_cuda_it_shows_the_reference_with_its_machine(monkeypatch, tmp_path, capsys):
    save(tmp_path / "h100" / "lesson99.json", [Measurement("pinned: copy done", [1e-3], machine=H100)],
         machine=H100, cuda_fork_error="Cannot re-initialize CUDA in forked subprocess", empty=[])
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    never = lambda: (_ for _ in ()).throw(AssertionError("measured without CUDA"))  # noqa: E731
    error = gpucell.measured_or_reference("lesson99", never, "cuda_fork_error", cuda=False, shows="x")
    assert error.startswith("Cannot re-initialize")
    line = capsys.readouterr().out
    assert line == "No CUDA here: our reference, measured on Intel Xeon (16 cores), NVIDIA H100 80GB HBM3, torch 2.11.0:\n"
    ms = gpucell.measured_or_reference("lesson99", never, lambda ms, doc: [m for m in ms if "copy" in m.name],
                                       cuda=False, shows="x")
    assert [m.name for m in ms] == ["pinned: copy done"] and capsys.readouterr().out == line
    # a key the reference lacks, or holds empty (saved before the cell measured it): the line for none
    for pick in ("worker_collate", "empty", lambda ms, doc: [m for m in ms if "pin_memory()" in m.name]):
        assert gpucell.measured_or_reference("lesson99", never, pick, cuda=False, shows="seconds per epoch") is None
        assert capsys.readouterr().out == ("No CUDA here, and no GPU run of ours holds this measurement: on a GPU this "
                                           "cell shows seconds per epoch.\n")


def test_without_cuda_or_a_reference_it_says_what_a_gpu_shows(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])  # nothing committed
    assert gpucell.measured_or_reference("lesson99", lambda: 1, "x", cuda=False, shows="a number") is None
    out = capsys.readouterr().out
    assert "on a GPU this cell shows a number." in out and "/" not in out  # no path, no file name


def test_a_full_only_cell_on_a_gpu_outside_full_mode_shows_the_reference(monkeypatch, tmp_path, capsys):
    """Quick mode must be quick on a GPU too: a cell that starts CUDA in workers measures in full mode only."""
    save(tmp_path / "h100" / "lesson99.json", [Measurement("x", [1e-3], machine=H100)], machine=H100,
         worker_collate={"first_batch_s": 4.0})
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    never = lambda: (_ for _ in ()).throw(AssertionError("measured outside full mode"))  # noqa: E731
    for mode in ("quick", "site"):
        got = gpucell.measured_or_reference("lesson99", never, "worker_collate", cuda=True, shows="x", full_only=True,
                                            mode=mode)
        assert got == {"first_batch_s": 4.0}
        out = capsys.readouterr().out
        assert "full mode only" in out and "Our reference, measured on Intel Xeon" in out and "No CUDA" not in out
    assert gpucell.measured_or_reference("lesson99", lambda: 7, "worker_collate", cuda=True, shows="x", full_only=True,
                                         mode="full") == 7
    assert gpucell.measured_or_reference("lesson99", never, "missing", cuda=True, shows="x", full_only=True,
                                         mode="quick") is None
    assert "on a GPU in full mode this cell shows x." in capsys.readouterr().out
