import subprocess
import sys

from gpufeed.course import doctor


def test_doctor_runs_and_exits_zero_on_this_machine():
    r = subprocess.run([sys.executable, "-m", "gpufeed", "doctor"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for row in ("torch", "torchvision", "CUDA", "CPU cores", "Pillow libjpeg-turbo", "TorchCodec", "DALI",
                "free disk (cache)", "pinned memory"):
        assert row in r.stdout
    assert "ready" in r.stdout


def test_a_missing_essential_is_a_problem(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "checks", lambda: [doctor.Check("torch", "missing", "problem", "install it")])
    assert doctor.main() == 1
    out = capsys.readouterr().out
    assert "!! torch" in out and "install it" in out


def test_limitations_are_not_problems(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "checks", lambda: [doctor.Check("CUDA", "no GPU", "limited", "reference results")])
    assert doctor.main() == 0
    assert "1 limitation" in capsys.readouterr().out
