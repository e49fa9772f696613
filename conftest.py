"""Test-wide fixtures: every test (doctests included) gets the environment back as it found it."""

import os

import matplotlib
import pytest

matplotlib.use("Agg")  # no display in tests, and no window popping up when run locally


@pytest.fixture(autouse=True)
def _restore_environ():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
