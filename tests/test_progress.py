"""The long loops' progress bars: the one rule for when they show (gpufeed.data.progress_bar), and the
loops that draw them (the library's memmap build, the course's sweeps)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import torch

from gpufeed.data.progress_bar import ENV_PROGRESS, show_progress
from gpufeed.measure import harness, progress


@pytest.fixture
def terminal(monkeypatch):
    """Call it first in a test: as a learner's terminal from then on (full mode, no CI, not under
    pytest, stderr a terminal); returns that stderr. (pytest sets ``PYTEST_CURRENT_TEST`` again
    between a fixture and the test, so it is removed in the test's own phase.)"""
    def become():
        for name in (ENV_PROGRESS, "GPUFEED_QUICK", "GPUFEED_MODE", "CI", "PYTEST_CURRENT_TEST"):
            monkeypatch.delenv(name, raising=False)
        tty = io.StringIO()
        tty.isatty = lambda: True
        monkeypatch.setattr(sys, "stderr", tty)
        return tty

    return become


def test_a_terminal_in_full_mode_sees_bars(terminal):
    terminal()
    assert show_progress()


@pytest.mark.parametrize("name, value", [("CI", "true"), ("CI", "1"),
                                         ("PYTEST_CURRENT_TEST", "tests/x.py::t (call)"),
                                         ("GPUFEED_PROGRESS", "0")])
def test_quick_mode_ci_pytest_and_the_switch_silence_them(terminal, monkeypatch, name, value):
    terminal()
    monkeypatch.setenv(name, value)
    assert not show_progress()


def test_ci_set_to_false_is_not_ci(terminal, monkeypatch):
    terminal()
    monkeypatch.setenv("CI", "false")
    assert show_progress()


def test_no_terminal_no_bars_but_a_notebook_kernel_has_them(terminal, monkeypatch):
    from gpufeed.data import progress_bar

    watched = terminal()
    watched.isatty = lambda: False  # output piped to a log file
    monkeypatch.setitem(sys.modules, "ipykernel", sys)  # imported, but no kernel runs this: no notebook
    assert not show_progress()
    monkeypatch.setattr(progress_bar, "in_a_notebook", lambda: True)  # a Jupyter kernel's shell
    assert show_progress()


@pytest.mark.parametrize("env", [{"GPUFEED_QUICK": "0"}, {"GPUFEED_QUICK": "1"}, {"CI": "false"}, {"CI": "off"},
                                 {"GPUFEED_MODE": "site"}])
def test_settings_that_say_no_are_not_read_as_yes(terminal, monkeypatch, env):
    """The cases where the two rules this one replaced disagreed (CI=false, GPUFEED_QUICK=0): each reads
    as its words say; the course's modes play no part in the rule."""
    terminal()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert show_progress()


def test_the_switch_wins_over_ci(terminal, monkeypatch):
    terminal()
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv(ENV_PROGRESS, "1")
    assert show_progress()
    monkeypatch.setenv(ENV_PROGRESS, "0")
    assert not show_progress() and not show_progress(False)


def test_the_switch_forces_bars_even_under_ci_and_a_typo_is_an_error(terminal, monkeypatch):
    terminal()
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv(ENV_PROGRESS, "1")
    assert show_progress()
    monkeypatch.setenv(ENV_PROGRESS, "sometimes")
    with pytest.raises(ValueError, match="GPUFEED_PROGRESS"):
        show_progress()


def test_a_process_started_by_a_test_is_silent_as_nbmake_kernels_are():
    """nbmake's kernels are processes started during a test: they inherit ``PYTEST_CURRENT_TEST``."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFEED_QUICK", "CI", ENV_PROGRESS)}
    code = ("import sys; sys.stderr.isatty = lambda: True; from gpufeed.data.progress_bar import show_progress; "
            "print(show_progress())")
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
