import json
import subprocess
import sys

import pytest

from gpufeed.cli import main


def test_bench_ceilings_writes_results_and_plots(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "gpufeed", "bench", "--ceilings", "--quick", "--device", "cpu",
                        "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=600, env={**__import__("os").environ})
    assert r.returncode == 0, r.stderr
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
