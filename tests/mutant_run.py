"""A pytest plugin for the runs of ``tests/test_simcuda_mutations.py`` (``-p mutant_run``): each
run checks a copy of the package with one ordering call deleted, and stops at its first failure
(``-x``). Two things make such a run cheap and sure:

* ``$GPUFEED_MUTANT_SRC``: the ``src`` folder of the copy. The run refuses to start (exit 4, a
  usage error, never a test failure) when ``gpufeed.data`` is imported from anywhere else, so a
  mutant can never "fail" against the checkout's own package.
* ``$GPUFEED_RUN_FIRST``: node-id prefixes (one per line) run before the rest of the suite, in
  that order. They are the tests that catch a missing ordering call soonest (a batch read later
  than the copy, memory in a loop that never syncs); every other test still runs after them, so
  the order changes how soon a mutant fails, never whether. A prefix that names no collected test
  is a usage error too (a renamed test would otherwise quietly slow every run).
"""

import os
from pathlib import Path

import pytest


def pytest_configure(config):
    import gpufeed.data

    src = Path(os.environ["GPUFEED_MUTANT_SRC"]).resolve()
    if src not in Path(gpufeed.data.__file__).resolve().parents:
        raise pytest.UsageError(f"the mutant's copy in {src} was not the one imported: {gpufeed.data.__file__}")


def pytest_collection_modifyitems(config, items):
    first = [line for line in os.environ.get("GPUFEED_RUN_FIRST", "").splitlines() if line]
    missing = [f for f in first if not any(item.nodeid.startswith(f) for item in items)]
    if missing:
        raise pytest.UsageError(f"GPUFEED_RUN_FIRST names no collected test: {missing}")

    def rank(item):
        return next((i for i, f in enumerate(first) if item.nodeid.startswith(f)), len(first))

    items.sort(key=rank)  # stable: collection order within each rank
