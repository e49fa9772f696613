"""Test-wide fixtures: the environment restored after every test (doctests included), and no
network beyond localhost, so that no test can download anything; and ``--cuda-sanitizer``
(``tests/cudasan.py``: each test's body under PyTorch's CUDA Stream Sanitizer)."""

import ipaddress
import os
import socket
import sys
from pathlib import Path

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
