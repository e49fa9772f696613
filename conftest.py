"""Test-wide fixtures: the environment restored after every test (doctests included), and no
network beyond localhost, so that no test can download anything; ``--cuda-sanitizer``
(``tests/cudasan.py``: each test's body under PyTorch's CUDA Stream Sanitizer); and the order and
groups `make test` runs the suite in on every core (pytest-xdist, ``--dist loadgroup``):
:func:`pytest_collection_modifyitems`."""

import ipaddress
import os
import socket
import sys
from pathlib import Path

# torch's CPU threads are a GNU OpenMP team whose idle threads spin for a while before they sleep.
# Under `make test` every core already runs a test or a lesson (pytest-xdist), so a spinning thread
# takes the core the busy one needs: on 2 cores a quick lesson's small tensor ops ran 10x slower
# (lesson 03 took 115 s, 44 s with passive waits). Passive: idle threads sleep at once. Read when
# OpenMP loads, so set before anything here imports torch; inherited by the lessons' kernels and the
# processes tests start. A learner's JupyterLab keeps torch's default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import matplotlib
import pytest

matplotlib.use("Agg")  # no display in tests, and no window popping up when run locally

sys.path.insert(0, str(Path(__file__).parent / "tests"))  # where pytest puts it for the tests too
pytest_plugins = ["cudasan"]  # tests/cudasan.py: --cuda-sanitizer

_real_connect = socket.socket.connect
_real_getaddrinfo = socket.getaddrinfo


def _local(host) -> bool:
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded_connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
        raise OSError(f"tests may not use the network (tried {address[0]}): generate data instead")
    return _real_connect(self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):
    if isinstance(host, bytes):
        host = host.decode()
    if not _local(host):
        raise socket.gaierror(f"tests may not use the network (tried to resolve {host})")
    return _real_getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect  # this process; `make test` also cuts child processes off
socket.getaddrinfo = _guarded_getaddrinfo


@pytest.fixture(autouse=True)
def _restore_environ():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


#: The xdist group of the tests marked ``timing``: they assert on wall-clock time, so they keep to
#: one worker and never time each other (with ``--dist loadgroup``; without xdist the mark is inert).
TIMING_GROUP = "timing"


def _is_notebook(item) -> bool:
    return item.nodeid.endswith(".ipynb")  # nbmake's items: one per lesson


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """The lessons first, then the tests marked ``slow``, then the rest, each in collection order:
    xdist hands out work in this order as workers free up, so the longest items (a lesson takes a
    minute or more; a test, seconds) start first and the short ones fill the gaps at the end,
    rather than one lesson running alone on one core at the end. Tests marked ``timing`` join
    :data:`TIMING_GROUP`."""
    rank = {id(item): 0 if _is_notebook(item) else 1 if item.get_closest_marker("slow") else 2 for item in items}
    items.sort(key=lambda item: rank[id(item)])  # stable: collection order within each rank
    for item in items:
        if item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))
