"""The pytest plugin of ``make test-gpu`` (``-p gpurun.plugin``): appends each test's result to
``$GPURUN_TESTS`` as it finishes, so a run cut at its limit still names what passed (a killed
pytest writes no junit file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

_report_path: Path | None = None


def pytest_configure(config):
    global _report_path
    if os.environ.get("GPURUN_TESTS") and not hasattr(config, "workerinput"):  # not in xdist's workers
        _report_path = Path(os.environ["GPURUN_TESTS"])
        _report_path.parent.mkdir(parents=True, exist_ok=True)


def pytest_runtest_logreport(report):
    if _report_path is None or (report.when != "call" and report.outcome == "passed"):
        return
    message = ""
    if report.outcome == "failed":
        crash = getattr(report.longrepr, "reprcrash", None)
        message = (f"{crash.path}:{crash.lineno}: {crash.message}" if crash else "") + "\n" + report.longreprtext[-3000:]
    elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    with open(_report_path, "a") as f:
        f.write(json.dumps({"name": report.nodeid, "when": report.when, "outcome": report.outcome,
                            "duration": round(report.duration, 3), "message": message.strip()}) + "\n")
