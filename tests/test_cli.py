import json

import pytest

from gpufeed.cli import main


def test_bench_ceilings_writes_results_and_plots(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    # In process (``python -m gpufeed`` is ``sys.exit(main())``): a fresh interpreter cost 4 s of imports.
    status = main(["bench", "--ceilings", "--quick", "--device", "cpu", "--out", str(tmp_path / "out")])
    assert status == 0, capsys.readouterr().err
    assert "wrote " in capsys.readouterr().out
    doc = json.loads((tmp_path / "out" / "ceilings.json").read_text())
    names = [m["name"] for m in doc["measurements"]]
    assert any(n.startswith("memcpy") for n in names) and any(n.startswith("read cold") for n in names)
    assert any(n == "decode pil 224x224" for n in names)
    assert doc["quick"] is True and doc["machine"]["cores"] >= 1
    assert not any(n.startswith("H2D") for n in names)  # --device cpu
    for png in ("ceilings-memory.png", "ceilings-file-read.png", "ceilings-decode.png"):
        assert (tmp_path / "out" / png).stat().st_size > 1000


def test_bench_on_cuda_fails_clearly_without_a_gpu(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["bench", "--device", "cuda", "--quick"]) == 2
    assert "CUDA was required" in capsys.readouterr().err


def test_unknown_command_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_data_prepare_only_a_lesson_without_datasets_builds_nothing(tmp_path, monkeypatch, capsys):
    """`make test-gpu LESSONS="03"` asks for lesson 03's datasets: it has none, which is no error."""
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path))
    assert main(["data", "prepare", "--only", "lesson03", "--device", "cpu"]) == 0
    assert "preparing 0 datasets" in capsys.readouterr().out and not any(tmp_path.iterdir())
    assert main(["data", "prepare", "--only", "lesson3", "--device", "cpu"]) == 2
    assert "lesson3 is not a lesson (lesson00 to lesson12) or the bench" in capsys.readouterr().err


def test_diagnose_reports_on_the_usual_torchvision_loop(tmp_path, capsys):
    from gpufeed.measure.synth import synth_folder

    folder = synth_folder(tmp_path / "jpegs", n=12, size=(48, 40), classes=2, progress=False).path
    assert main(["diagnose", "--folder", str(folder), "--batch-size", "4", "--crop", "32", "--batches", "2"]) == 0
    out = capsys.readouterr().out
    assert "waiting for the next batch" in out
    assert "DataLoader(num_workers=0)" in out or "not the bottleneck" in out  # which: this machine's load decides


@pytest.mark.parametrize(("argv", "words"), [(["--folder", "/nonexistent/gpufeed"], "error: "),
                                             (["--model", "nosuchnet"], "no such model")])
def test_diagnose_bad_input_is_one_line(tmp_path, capsys, argv, words):
    args = ["diagnose", "--folder", str(tmp_path), *argv] if argv[0] == "--model" else ["diagnose", *argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err
