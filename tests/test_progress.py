"""The long loops' progress bars: the one rule for when they show, and the loops that draw them."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import torch

from gpufeed.measure import harness, progress


@pytest.fixture
def terminal(monkeypatch):
    """Call it first in a test: as a learner's terminal from then on (full mode, no CI, not under
    pytest, stderr a terminal); returns that stderr. (pytest sets ``PYTEST_CURRENT_TEST`` again
    between a fixture and the test, so it is removed in the test's own phase.)"""
    def become():
        for name in (progress.ENV_PROGRESS, "GPUFEED_QUICK", "CI", "PYTEST_CURRENT_TEST"):
            monkeypatch.delenv(name, raising=False)
        tty = io.StringIO()
        tty.isatty = lambda: True
        monkeypatch.setattr(sys, "stderr", tty)
        return tty

    return become


def test_a_terminal_in_full_mode_sees_bars(terminal):
    terminal()
    assert progress.wanted()


@pytest.mark.parametrize("name, value", [("GPUFEED_QUICK", "1"), ("CI", "true"), ("CI", "1"),
                                         ("PYTEST_CURRENT_TEST", "tests/x.py::t (call)"),
                                         ("GPUFEED_PROGRESS", "0")])
def test_quick_mode_ci_pytest_and_the_switch_silence_them(terminal, monkeypatch, name, value):
    terminal()
    monkeypatch.setenv(name, value)
    assert not progress.wanted()


def test_ci_set_to_false_is_not_ci(terminal, monkeypatch):
    terminal()
    monkeypatch.setenv("CI", "false")
    assert progress.wanted()


def test_no_terminal_no_bars_but_a_notebook_kernel_has_them(terminal, monkeypatch):
    watched = terminal()
    watched.isatty = lambda: False  # output piped to a log file
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not progress.wanted()
    monkeypatch.setitem(sys.modules, "ipykernel", sys)  # what a Jupyter kernel has loaded
    assert progress.wanted()


def test_the_switch_forces_bars_even_in_quick_mode_and_a_typo_is_an_error(terminal, monkeypatch):
    terminal()
    monkeypatch.setenv("GPUFEED_QUICK", "1")
    monkeypatch.setenv(progress.ENV_PROGRESS, "1")
    assert progress.wanted()
    monkeypatch.setenv(progress.ENV_PROGRESS, "sometimes")
    with pytest.raises(ValueError, match="GPUFEED_PROGRESS"):
        progress.wanted()


def test_a_process_started_by_a_test_is_silent_as_nbmake_kernels_are():
    """nbmake's kernels are processes started during a test: they inherit ``PYTEST_CURRENT_TEST``."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFEED_QUICK", "CI", progress.ENV_PROGRESS)}
    code = "import sys; sys.stderr.isatty = lambda: True; from gpufeed.measure import progress; print(progress.wanted())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_interleave_draws_a_bar_with_its_label_where_wanted(terminal):
    watched = terminal()
    harness.interleave({"a": lambda: None, "b": lambda: None}, repeats=2, warmup=1, desc="the ladder")
    drawn = watched.getvalue()
    assert "the ladder" in drawn and "b, 2/2" in drawn  # the last call's label


def test_interleave_draws_nothing_where_not_wanted(terminal, monkeypatch):
    watched = terminal()
    monkeypatch.setenv("CI", "true")
    harness.interleave({"a": lambda: None}, repeats=2, warmup=1, desc="the ladder")
    assert watched.getvalue() == ""


def test_the_knobs_sweep_names_the_configuration_it_times(terminal):
    watched = terminal()
    from torch.utils.data import TensorDataset

    from gpufeed.course.lesson07.knobs import sweep

    ds = TensorDataset(torch.zeros(8, 3), torch.zeros(8))
    ms = sweep({"tiny": ds}, [{"num_workers": 0}], batch_size=4, repeats=1, warmup=0)
    assert len(ms) == 1
    assert "sweep of tiny" in watched.getvalue() and "0 workers" in watched.getvalue()


def test_log_lines_go_above_a_bar_not_into_it(terminal):
    terminal()
    lines = []
    log = progress.around(lines.append)
    with progress.bar(range(2), desc="working") as shown:
        for _ in shown:
            log("a result")
    assert lines == ["a result", "a result"]
