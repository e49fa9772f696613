"""Where the ranks on one machine meet: the loopback interface and a free port.

Both :mod:`gpufeed.course.lesson12.launch` (which starts torchrun) and :mod:`gpufeed.course.lesson12.distributed` (the
program it starts) need these; here, below both, neither has to import the other. Taught in
``notebooks/12_scaling.ipynb``.

Example:
    >>> 1024 <= free_port() < 65536
    True
    >>> loopback_ifname() in ("lo", "lo0", None)
    True
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it; another program could take it
    before we do, which :func:`launch` answers by trying once more)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def loopback_ifname() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), or None."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)
