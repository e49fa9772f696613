"""``gpufeed.setup()``, the first call of every lesson: what it prints, and what it keeps off the page."""

import logging
import os
import subprocess
import sys
import warnings

import pytest

from gpufeed.course import session
from gpufeed.measure import harness, noise


def test_setup_quiets_the_libraries_but_keeps_what_the_learner_set(monkeypatch):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "INFO")  # the learner's own choice
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    session.setup(verbose=False)
    assert os.environ["KINETO_LOG_LEVEL"] == "6" and os.environ["TORCH_CPP_LOG_LEVEL"] == "INFO"
    assert all(logging.getLogger(name).level == logging.ERROR for name in session.QUIET_LOGGERS)


def test_a_noisy_measurement_is_one_stdout_line_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    session.setup(verbose=False)
    session.setup(verbose=False)  # twice: still one line per warning
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for _ in range(5):  # a loop over one case: named once
            noise.warn_if_noisy([harness.Measurement("pinned, 64 MB", [1.0, 1.5, 2.0])])
    out, err = capsys.readouterr()
    assert out == "[noisy] pinned, 64 MB: IQR above 10% of the median; close other programs or raise repeats\n"
    assert err == ""
    with pytest.warns(UserWarning, match="something else"):  # other warnings go where they went
        warnings.warn("something else", UserWarning, stacklevel=1)


@pytest.mark.slow
def test_after_setup_the_profiler_and_cpp_extension_print_nothing_on_stderr():
    """In a fresh process, as in a lesson's kernel: setup() before torch loads, then what printed
    notes for torch's developers on stderr (the profiler's start/stop lines, where CUDA_HOME points)."""
    code = ("import gpufeed\ngpufeed.setup(verbose=False)\nimport torch\n"
            "from torch.profiler import profile, ProfilerActivity, schedule\n"
            "with profile(activities=[ProfilerActivity.CPU]):\n    torch.ones(8).sum()\n"
            # a schedule of two cycles: torch warns that each cycle's events are cleared (lesson 02)
            "with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1, repeat=2),"
            " on_trace_ready=lambda p: None) as p:\n"
            "    for _ in range(5):\n        torch.ones(8).sum(); p.step()\n"
            "import torch.utils.cpp_extension\nprint('ran')\n")
    env = {k: v for k, v in os.environ.items() if k not in session.QUIET_ENV}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ran", r.stderr
    assert r.stderr == ""
