"""`make lab LAB_ARGS=--no-browser` serves JupyterLab: its /lab page answers 200 on localhost."""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def stop_group(proc: subprocess.Popen) -> None:
    """Ends a server started with ``start_new_session=True`` and everything it started (make, jupyter, kernels)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_serves_jupyterlab(tmp_path):
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.token= --ServerApp.port_retries=0"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, status = time.time() + 120, None
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab", timeout=5) as r:
                    status, body = r.status, r.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert status == 200, proc.stdout.read().decode()[-2000:] if proc.poll() is not None else "no answer"
        assert "<title>JupyterLab" in body
    finally:
        stop_group(proc)
