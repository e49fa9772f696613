"""Peak PSS: a process that touches more memory reads more; workers are counted."""

import mmap
import subprocess
import sys
import time

import pytest

from gpufeed.measure import memory

pytestmark = pytest.mark.skipif(memory.pss(1) is None and memory.tree_pss() is None, reason="this OS reports no PSS (Linux only)")


def test_peak_grows_with_touched_memory():
    with memory.PeakPss() as small:
        pass
    with memory.PeakPss() as big:
        # A fresh anonymous mapping, each page written: new resident memory whatever the allocator
        # kept from earlier tests (a bytearray can reuse a heap that is resident already).
        block = mmap.mmap(-1, 64 << 20)
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        big.sample()  # the sampler thread may not have run yet
        block.close()
    assert big.peak > small.peak + (32 << 20)


def test_children_are_counted():
    code = "b = bytearray(48 << 20); import time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.5)
        assert child.pid in memory.children(memory.os.getpid())
        assert memory.tree_pss() > memory.pss(memory.os.getpid()) + (40 << 20)
    finally:
        child.kill()
        child.wait()


def test_missing_process_reads_none():
    assert memory.pss(2**22 + 12345) is None


@pytest.mark.parametrize("max_share, most, least", [(0.1, 5, 2), (1.0, 20, 4)])
def test_the_sampler_paces_itself_by_what_a_reading_costs(monkeypatch, max_share, most, least):
    """A reading that takes 20 ms (a process that has read a large memmap) is taken at most once
    per 20 ms / max_share: with 0.1, every 0.2 s at the most, not every 50 ms."""
    def slow_tree_pss(pid=None):
        time.sleep(0.02)
        return 1 << 20

    monkeypatch.setattr(memory, "tree_pss", slow_tree_pss)
    with memory.PeakPss(max_share=max_share) as p:
        time.sleep(0.6)
    assert p.peak == 1 << 20
    assert least <= p.readings <= most, p.readings  # entry and exit readings included


def test_the_sampler_refuses_a_share_outside_one_core():
    with pytest.raises(ValueError, match="max_share"):
        memory.PeakPss(max_share=0)
