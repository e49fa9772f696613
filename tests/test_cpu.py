"""Cores busy: every thread of the process counts, and so do its workers, running or already reaped.

Each check compares CPU seconds with CPU seconds (a spin for a set amount of CPU time, not of wall
time), so a busy machine that delays the spin changes nothing asserted here.
"""

import subprocess
import sys
import threading
import time

import pytest

from gpufeed.measure import cpu

SPIN = "import time\nwhile time.process_time() < {s}: pass\n"  # a worker that burns {s} s of CPU, then ends


@pytest.mark.timing
def test_an_idle_wait_keeps_no_core_busy():
    with cpu.CoresBusy() as busy:
        time.sleep(0.3)
    assert busy.wall_s >= 0.3 and busy.cpu_s < 0.1 and busy.cores < 0.35


@pytest.mark.timing
def test_a_busy_thread_counts():
    def spin():
        t = time.thread_time()
        while time.thread_time() - t < 0.3:
            pass

    with cpu.CoresBusy() as busy:
        t = threading.Thread(target=spin)
        t.start()
        t.join()
    assert busy.cpu_s >= 0.29 and busy.cores == pytest.approx(busy.cpu_s / busy.wall_s)


@pytest.mark.timing
@pytest.mark.skipif(cpu.proc_cpu_seconds(1) is None, reason="cannot read other processes")
def test_a_running_worker_counts():
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(s=60)])
    try:
        time.sleep(0.3)  # started
        before = cpu.proc_cpu_seconds(child.pid)
        with cpu.CoresBusy() as busy:
            time.sleep(0.5)  # this process sleeps; the worker spins
        spun = cpu.proc_cpu_seconds(child.pid) - before
        assert spun > 0.05 and busy.cpu_s >= spun - 0.03  # the worker's time (in 10 ms ticks) is in it
    finally:
        child.kill()
        child.wait()


def test_a_worker_that_ended_counts():
    with cpu.CoresBusy() as busy:
        subprocess.run([sys.executable, "-c", SPIN.format(s=0.4)], check=True)  # started, spun, reaped inside
    assert busy.cpu_s >= 0.4


def test_missing_process_reads_none():
    assert cpu.proc_cpu_seconds(2**22 + 12345) is None
