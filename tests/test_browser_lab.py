"""Lesson 01 in JupyterLab in a real, headless Chromium: Run All, no errors, the sliders redraw.

Run by ``make test-browser`` (``pytest -m browser``), left out of ``make test``. The browser is
Debian's ``chromium`` (``GPUFEED_CHROMIUM``, default ``/usr/bin/chromium``) driven by Playwright;
nothing is downloaded (no ``playwright install``). Without chromium the test is skipped, unless
``GPUFEED_REQUIRE_BROWSER=1`` (which ``make test-browser`` sets), where it fails with a hint.
JupyterLab runs on a copy of the notebook in a temporary folder, with its own temporary Jupyter
config, data and runtime folders, so neither the committed notebook nor the user's settings change.
Screenshots go to ``out/test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_lab import free_port, stop_group  # tests/test_lab.py

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "01_bottlenecks.ipynb"
ARTIFACTS = ROOT / "out" / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_ALL_TIMEOUT_S = 600  # quick mode takes well under 90 s alone; a busy CI machine and the browser add to it

#: JupyterLab settings for the test: every cell in the DOM (so the test can read each one), and
#: no news or update checks (no network, and no notification over the page).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}

pytestmark = pytest.mark.browser


def unavailable(reason: str):
    """Skips, or fails with the fix when the browser test is required (``make test-browser``)."""
    if os.environ.get("GPUFEED_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; run `make browser-deps` (installs Debian's chromium, as root) "
                    "or point GPUFEED_CHROMIUM at a Chromium binary", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    chromium = os.environ.get("GPUFEED_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(chromium, os.X_OK):
        unavailable(f"no Chromium at {chromium}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the Python package playwright is missing (it is in the dev group: `make env`)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the notebook; yields its base URL and its root folder."""
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "notebooks"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    config = tmp / "config"
    for name, values in LAB_SETTINGS.items():
        path = config / "lab" / "user-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MPLBACKEND"))}
    env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(tmp / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), IPYTHONDIR=str(tmp / "ipython"),
               JUPYTER_PLATFORM_DIRS="0", GPUFEED_QUICK="1")
    port = free_port()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", "--IdentityProvider.token=", "--ServerApp.password=",
           f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url, root
    finally:
        stop_group(proc)
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp / "lab.log", ARTIFACTS / "lab-server.log")


def code_cells(page):
    return page.locator(".jp-Notebook .jp-CodeCell")


def prompts(page) -> list[str]:
    """The ``[n]:`` prompt of every code cell: ``[ ]:`` not run, ``[*]:`` running or queued."""
    return [t.strip() for t in page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()]


def run_all(page, shots: Path) -> list[str]:
    """Menu Run > Run All Cells, then waits until no cell is running or queued; returns the prompts."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    deadline, started = time.time() + RUN_ALL_TIMEOUT_S, False
    while True:
        now = prompts(page)
        started = started or "[*]:" in now
        # Done: every cell numbered, or (after an error, which stops Run All) nothing left queued.
        if all(p[1:-2].isdigit() for p in now) or (started and "[*]:" not in now):
            return now
        if time.time() > deadline:
            page.screenshot(path=str(shots / "lab-01-timeout.png"))
            pytest.fail(f"Run All did not finish in {RUN_ALL_TIMEOUT_S} s; prompts: {now}")
        time.sleep(1)


def image_bytes(area) -> str:
    """The plot under the sliders: the PNG's data URL (its bytes, base64)."""
    img = area.locator(".widget-output img, .jp-OutputArea-output img").last
    img.wait_for(state="visible", timeout=60_000)
    return img.get_attribute("src") or ""


def test_lesson01_runs_in_jupyterlab_and_its_sliders_redraw_the_plot(browser, lab):
    url, root = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{url}/lab/tree/{NOTEBOOK}", timeout=120_000)
        code_cells(page).first.wait_for(timeout=120_000)
        page.locator(".jp-StatusBar-Widget", has_text="| Idle").first.wait_for(timeout=120_000)  # the kernel
        page.screenshot(path=str(ARTIFACTS / "lab-01-opened.png"))

        counts = run_all(page, ARTIFACTS)
        page.screenshot(path=str(ARTIFACTS / "lab-01-ran.png"))

        # No cell shows an error: save, then read the outputs the kernel sent, as JupyterLab saved them.
        page.keyboard.press("Control+s")
        page.locator(".lm-TabBar-tab.jp-mod-dirty").wait_for(state="detached", timeout=30_000)
        saved = [c for c in json.loads((root / NOTEBOOK).read_text())["cells"] if c["cell_type"] == "code"]
        failed = [f"{''.join(c['source']).splitlines()[0]!r}: {o['ename']}: {o['evalue']}"
                  for c in saved for o in c["outputs"] if o["output_type"] == "error"]
        assert not failed, f"cells with an error output: {failed}"
        assert not page.locator(".jp-OutputArea-output", has_text="Traceback (most recent call last)").count()
        assert all(p[1:-2].isdigit() for p in counts), f"cells that did not run: {counts}"

        # The explorer's sliders render (the ipywidgets extension is active), one per knob.
        explorer = page.locator(".widget-interact").first
        explorer.scroll_into_view_if_needed()
        sliders = explorer.locator(".widget-slider, .widget-hslider")
        assert sliders.count() >= 10, "the explorer's sliders did not render: is the ipywidgets extension active?"
        assert explorer.locator(".widget-label", has_text="compute (ms)").count() == 1
        before = image_bytes(explorer)
        explorer.screenshot(path=str(ARTIFACTS / "lab-01-explorer-before.png"))

        # Move the "workers" slider with the keyboard: Home takes it to 1 worker, a slow loop.
        workers = explorer.locator(".widget-slider, .widget-hslider").filter(has_text="workers")
        readout = workers.locator(".widget-readout")
        old = readout.inner_text()
        handle = workers.locator(".noUi-handle, .ui-slider-handle").first
        handle.focus()
        handle.press("Home")
        deadline = time.time() + 60
        while time.time() < deadline and (readout.inner_text() == old or image_bytes(explorer) == before):
            time.sleep(0.5)
        after = image_bytes(explorer)
        explorer.screenshot(path=str(ARTIFACTS / "lab-01-explorer-after.png"))
        assert readout.inner_text() != old, f"the workers slider did not move (still {old})"
        assert after != before, "moving the slider did not redraw the plot"
        assert not errors, f"errors in the page: {errors}"
    finally:
        page.close()


def test_the_worked_solutions_open_folded_in_jupyterlab(browser, lab):
    """Each solution cell (tagged "solution", jupyter.source_hidden) shows in JupyterLab as a folded
    input, a placeholder with its first line ("# Solution to exercise N: ..."), and no editor; the
    setup cell, folded on the site only, shows its code."""
    url, root = lab
    solutions = [c for c in json.loads((root / NOTEBOOK).read_text())["cells"] if "solution" in c["metadata"].get("tags", [])]
    assert solutions, f"{NOTEBOOK} has no solution cells"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/lab/tree/{NOTEBOOK}", timeout=120_000)
        code_cells(page).first.wait_for(timeout=120_000)
        folded = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPlaceholder .jp-PlaceholderText")
        folded.first.wait_for(timeout=60_000)
        titles = [t.strip() for t in folded.all_inner_texts() if t.strip().startswith("# Solution to exercise")]
        assert titles == [''.join(c["source"]).splitlines()[0] for c in solutions]
        editors = page.locator(".jp-Notebook .jp-CodeCell .jp-Editor").all_inner_texts()
        assert not [e for e in editors if "# Solution to exercise" in e], "a solution's code is shown unfolded"
        # The setup cell, which the site folds (tag hide-cell), is shown here: it is run first.
        assert any("google.colab" in e and "gpufeed.setup(" in e for e in editors), "the setup cell is folded"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator(".jp-InputPlaceholder").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "lab-01-solutions-folded.png"))
    finally:
        page.close()
