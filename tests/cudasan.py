"""``pytest --cuda-sanitizer``: each test's body under PyTorch's CUDA Stream Sanitizer (CSAN,
``torch.cuda._sanitizer``), whose report fails the test. ``make test-gpu`` runs the ``cuda`` tests
this way after running them plainly.

The sanitizer is on only while a test's body runs (pytest's call phase), never while fixtures
are made: tensordict's ``MemoryMappedTensor.from_tensor`` cannot wrap a tensor that the
sanitizer's dispatch mode has handed back ("the raw Tensor object is already associated to a
python object of type Tensor", the first H100 run), so the ``mm`` fixtures build their memmaps
before it is on; a memmap built inside a test body is built with it paused. Its allocation,
stream and event records run from the start (CSAN backfills what it missed).

What fails a test: the ``CUDASanitizerErrors`` CSAN raises from the kernel launch that races, and
also a race it reported where the exception was swallowed (a generator closed by the garbage
collector, a ``try``/``except`` in a thread): every error CSAN found while the body ran is kept
and reported. CSAN watches the thread that enabled it (PyTorch's dispatch modes are per thread):
kernels a prefetcher's own thread launches are not seen; the simulator's tests
(``gpufeed.simcuda``, marker ``simcuda``) are what order those.

Loaded by the root ``conftest.py``; the option is for a CUDA machine and stops pytest elsewhere.
"""

from __future__ import annotations

import contextlib
import inspect
import os

import pytest

OPTION = "--cuda-sanitizer"
_KEY = pytest.StashKey["Sanitizer"]()


class SanitizerReport(AssertionError):
    """The races CSAN found while a test's body ran (raised after the body when it passed)."""


def pytest_addoption(parser):
    parser.addoption(OPTION, action="store_true", default=False,
                     help="run each test's body under PyTorch's CUDA Stream Sanitizer; a race it "
                          "reports fails the test (fixtures are made with it off; needs CUDA)")


class Sanitizer:
    """CSAN's one instance (``torch.cuda._sanitizer.cuda_sanitizer``), switched on per test body,
    with every error its event handler finds kept in :attr:`errors`."""

    def __init__(self):
        from torch.cuda import _sanitizer as csan

        self.tool = csan.cuda_sanitizer
        self.errors: list = []
        handler = self.tool.dispatch.event_handler
        launch = handler._handle_kernel_launch

        def recorded(*args, **kwargs):
            found = launch(*args, **kwargs)
            self.errors.extend(found)
            return found

        handler._handle_kernel_launch = recorded
        self._pause_memmap_builds()

    @contextlib.contextmanager
    def on(self):
        self.tool.enable()
        try:
            yield
        finally:
            self.tool.disable()

    @contextlib.contextmanager
    def paused(self):
        """CSAN off for the block where it was on (this thread only)."""
        was_on = self.tool.enabled
        if was_on:
            self.tool.disable()
        try:
            yield
        finally:
            if was_on:
                self.tool.enable()

    def _pause_memmap_builds(self) -> None:
        try:
            from tensordict import MemoryMappedTensor
        except ImportError:
            return
        original = inspect.getattr_static(MemoryMappedTensor, "from_tensor")
        if not isinstance(original, classmethod):
            return
        sanitizer = self

        def from_tensor(cls, *args, **kwargs):
            with sanitizer.paused():
                return original.__func__(cls, *args, **kwargs)

        MemoryMappedTensor.from_tensor = classmethod(from_tensor)


def pytest_configure(config):
    if not config.getoption(OPTION):
        return
    if os.environ.get("TORCH_CUDA_SANITIZER"):
        raise pytest.UsageError(f"{OPTION}: unset TORCH_CUDA_SANITIZER (it turns the sanitizer on for the "
                                "whole process, fixtures included); the option turns it on per test body")
    import torch

    if not torch.cuda.is_available():
        raise pytest.UsageError(f"{OPTION}: torch sees no CUDA GPU; the CUDA Stream Sanitizer watches CUDA "
                                "streams, so run it on a GPU machine (`make test-gpu`)")
    config.stash[_KEY] = Sanitizer()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    sanitizer = item.config.stash.get(_KEY, None)
    if sanitizer is None:
        return (yield)
    sanitizer.errors.clear()
    with sanitizer.on():
        result = yield  # an exception from the body (CSAN's own included) fails the test as it is
    if sanitizer.errors:
        found, sanitizer.errors = sanitizer.errors, []
        raise SanitizerReport(f"the CUDA Stream Sanitizer found {len(found)} unsynchronized access(es) "
                              "while the test ran (an exception was swallowed on the way):\n\n"
                              + "\n\n".join(str(e) for e in found))
    return result
