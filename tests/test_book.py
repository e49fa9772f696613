"""The course site (`make book`, ``tools/book.py``): its pieces here, the built site in a browser.

Unmarked tests check the build's own logic (fast; two build a one-lesson site with Sphinx). The tests
marked ``browser`` open ``build/book/html`` (built by ``make book``) in headless Chromium, served on
127.0.0.1: the home page and three lessons, their figures drawn, their tables, no error output, the
machine each page was measured on, the Colab link, next/previous between lessons, the search page,
and no request leaving the machine; then every lesson at 1280 and 1920 pixels wide, opening on the
lesson rather than its setup, with no code line cut at the column's edge. Without a built site or Chromium it skips, unless ``GPUFEED_REQUIRE_BROWSER=1``
(``make test-browser``), where it fails and says which make target is missing.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "book" / "html"
ARTIFACTS = ROOT / "out" / "test-artifacts"
#: Lessons the browser opens: the Gantt charts and sliders (01), a sweep with its table (07), the
#: ladder and the committed GPU reference (11).
LESSONS = ("01_bottlenecks", "07_dataloader", "11_together")


def needs_the_book_group():
    """The site's tools come with the `book` dependency group (`make env` installs it; the oldest-
    versions venv of `make test-oldest` does not, and skips these tests)."""
    for module in ("sphinx", "myst_nb", "jupyter_cache"):
        pytest.importorskip(module, reason="the `book` dependency group is not installed")


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # Registered under its name: doctest matches a function to the module sys.modules holds by that
    # name, and another test may have imported tools/book.py as ``book`` already.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@functools.cache
def book():
    return load("book")


def test_home_page_lists_every_lesson_in_order_and_the_deck():
    tail = book().home_page_tail(deck_built=True)
    entries = re.search(r"```\{toctree\}\n(.*?)```", tail, re.S).group(1).split("\n")
    lessons = [e for e in entries if e.startswith("notebooks/")]
    assert lessons == [f"notebooks/{p.stem}" for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    assert len(lessons) >= 13
    assert 'href="slides/index.html"' in tail
    assert "make slides" in book().home_page_tail(deck_built=False)


def test_readme_links_to_files_go_to_the_repository_and_lessons_stay_pages():
    readme = book().link_files_to_repository((ROOT / "README.md").read_text())
    url = book().repo_url()
    assert f"]({url}/blob/main/LICENSE)" in readme
    assert "](notebooks/03_dtypes.ipynb)" in readme
    # every relative link left is a lesson or an anchor: the site has a page for each
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        assert re.match(r"https?:|#|notebooks/\d\d_\w+\.ipynb$", target), target


def test_machine_note_reads_the_setup_cells_lines_and_refuses_without_them():
    out = ("gpufeed 0.1.0 · torch 2.11.0\nmachine: AMD EPYC (2 cores), no GPU, torch 2.11.0\n"
           "device:  cpu   mode: quick (GPUFEED_QUICK=1: tiny sizes)\n")
    note = book().machine_note(out, 1_700_000_000.0, 42.4)
    assert "measured on AMD EPYC (2 cores), no GPU, torch 2.11.0 (device cpu, quick mode)" in note
    assert "42 s run on 2023-11-1" in note
    with pytest.raises(ValueError, match="machine:"):
        book().machine_note("gpufeed 0.1.0\n", None, None)


def test_the_setup_cell_prints_what_the_page_header_reads(capsys):
    from gpufeed.course.session import setup

    setup()
    out = capsys.readouterr().out
    assert book().MACHINE_LINE.search(out) and book().MODE_LINE.search(out)


def test_cache_key_follows_the_package_and_the_mode(monkeypatch):
    monkeypatch.delenv("GPUFEED_MODE", raising=False)
    monkeypatch.setenv("GPUFEED_QUICK", "1")
    quick = book().cache_key()
    assert quick == book().cache_key() and re.fullmatch(r"[0-9a-f]{12}", quick)
    monkeypatch.setenv("GPUFEED_MODE", "site")
    site = book().cache_key()
    monkeypatch.setenv("GPUFEED_MODE", "full")
    assert len({quick, site, book().cache_key()}) == 3


def test_execute_refuses_full_mode(monkeypatch, capsys):
    monkeypatch.delenv("GPUFEED_QUICK", raising=False)
    monkeypatch.delenv("GPUFEED_MODE", raising=False)
    assert book().execute() == 2
    assert "GPUFEED_MODE=site" in capsys.readouterr().err


def test_the_page_header_says_what_the_mode_can_carry_and_shows_the_evidence_box():
    needs_the_book_group()
    text = lambda mode: "".join(t for t, _ in book().mode_note(["cpu-epyc"], mode))  # noqa: E731
    assert "cannot tell" in text("site") and "decided" in text("site")
    assert "only to show that the lesson runs" in text("quick")
    from gpufeed.measure.lessons import LESSONS

    for x in LESSONS:
        box = book().evidence_nodes(x.number, cuda=False).astext()
        assert all(c.says in box for c in x.claims), x.number


def test_an_error_output_fails_the_build():
    needs_the_book_group()
    from docutils import nodes
    from sphinx.errors import ExtensionError

    ok = nodes.section("", nodes.literal_block("", "machine: x", classes=["output", "stream"]))
    book().check_no_error_output(ok, "notebooks/00_x")
    bad = nodes.section("", nodes.literal_block("", "ZeroDivisionError: division by zero",
                                                classes=["output", "traceback", "highlight-ipythontb"]))
    with pytest.raises(ExtensionError, match="00_x: an error output on the page: ZeroDivisionError"):
        book().check_no_error_output(bad, "notebooks/00_x")


@pytest.mark.slow
def test_execute_names_a_failing_lesson_and_runs_an_unchanged_one_only_once(tmp_path, monkeypatch, capsys):
    needs_the_book_group()
    import nbformat

    b = book()
    monkeypatch.setattr(b, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(b, "BUILD", tmp_path / "build")
    monkeypatch.setenv("GPUFEED_QUICK", "1")
    b.NOTEBOOKS.mkdir()
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}

    def lesson(name: str, code: str):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)], metadata=kernel),
                       b.NOTEBOOKS / name)

    lesson("00_a.ipynb", "print('fine')")
    lesson("01_b.ipynb", "1 / 0")
    assert b.execute() == 1
    out = capsys.readouterr()
    assert "01_b.ipynb failed" in out.err and "ZeroDivisionError" in out.err
    assert "ran 00_a.ipynb" in out.out

    lesson("01_b.ipynb", "print(1 / 1)")
    assert b.execute() == 0
    assert "1 lessons cached, 1 to run" in capsys.readouterr().out
    assert b.execute() == 0
    assert "2 lessons cached, 0 to run" in capsys.readouterr().out

    lesson("01_b.ipynb", "import sys\nprint('UserWarning: careful', file=sys.stderr)")  # runs; its page is not clean
    assert b.execute() == 1
    assert "01_b.ipynb shows a learner what is not theirs to read (1 stderr block)" in capsys.readouterr().err


def test_the_output_check_flags_stderr_machine_paths_and_jargon_and_nothing_a_learner_may_read():
    def cell(*outputs):
        return {"cell_type": "code", "source": "x", "outputs": list(outputs)}

    def out(text, name="stdout"):
        return {"output_type": "stream", "name": name, "text": text}

    def shown(text, mime="text/plain"):
        return {"output_type": "display_data", "data": {mime: text}, "metadata": {}}

    clean = [cell(out("machine: AMD EPYC (2 cores), no GPU\ndevice:  cpu   mode: quick (GPUFEED_QUICK=1: tiny sizes)\n"),
                  out("saved: lesson00.json, in this machine's results folder\n")),
             cell(shown("No CUDA here, and no GPU measurement of ours is committed (results/<gpu>/lesson00.json)")),
             cell(shown("<function f at 0x7f3a2b1c9d40>, 1234567 images, colour #1f77b4, ~/.cache/gpufeed")),
             cell(shown("published by AWS: [EFS](https://github.com/awsdocs/efs/blob/716709cebed2988674e65a75d0c714ff14cc5b98/"
                        "performance.md)", "text/markdown")),  # a permalink cites its source's commit
             cell(shown("**2.5x** as fast as lesson 05 (section 4); [noisy] pinned: IQR 23% of the median",
                        "text/markdown")),
             {"cell_type": "markdown", "source": "commit 305e292 in issue 29 at /tmp/x"}]  # not an output
    assert book().output_problems({"cells": clean}, places=["/srv/course"]) == []

    bad = [cell(out("/tmp/ipykernel_1/2.py:9: NoisyMeasurementWarning: noisy\n", "stderr"), out("fine\n")),
           cell(out("saved to /home/ana/.cache/gpufeed/results/cpu/lesson00.json\n")),
           cell(shown("trace in /tmp/tmpab12cd/step6.json")),
           cell(out("from .venv/lib/python3.11/site-packages/torch/x.py\n")),
           cell(shown("read /srv/course/notebooks/data.bin and /srv/course/x", "text/html")),
           cell(out("our H100 run at commit 305e292, as issue 29 and pull request #8496 found; "
                    "set GPUFEED_RESULTS=results\n")),
           cell({"output_type": "error", "ename": "ValueError", "evalue": "no", "traceback": []})]
    found = book().output_problems({"cells": bad}, places=["/srv/course"])
    assert [(c, kind) for c, kind, _ in found] == [
        (0, "stderr block"), (1, "machine path"), (2, "machine path"), (3, "machine path"), (4, "machine path"),
        (5, "commit hash"), (5, "issue number"), (5, "pull request"), (5, "maintainers' variable"), (6, "error output")]
    assert found[0][2].startswith("/tmp/ipykernel_1/2.py:9: NoisyMeasurementWarning")
    assert [e for _, k, e in found if k == "maintainers' variable"] == ["GPUFEED_RESULTS"]


def test_the_output_check_knows_this_machines_folders(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "my-cache"))
    places = book().machine_paths()
    assert str(tmp_path / "my-cache") in places and str(book().ROOT) in places and "/" not in places
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": f"built {tmp_path / 'my-cache'}/lesson05/mm\n"}]}]}
    assert book().check_outputs({"05_memmap.ipynb": nb, "06_x.ipynb": {"cells": []}}) == 1
    err = capsys.readouterr().err
    assert "05_memmap.ipynb shows a learner what is not theirs to read (1 machine path)" in err
    assert "06_x" not in err


def test_widget_reprs_are_recognised():
    assert book().WIDGET_REPR.match("interactive(children=(IntSlider(value=32, ...")
    assert book().WIDGET_REPR.match("VBox(children=(Dropdown(...")
    assert not book().WIDGET_REPR.match("machine: AMD EPYC")


def build_fixture_site(tmp_path: Path, notebook) -> str:
    """Builds a one-lesson site with the course's own hooks (tools/book.py) and returns the lesson's
    HTML: ``notebook`` as ``notebooks/00_t.ipynb`` (not executed: its outputs are the ones given),
    two committed machines in ``results/``; warnings fail it, as in `make book`."""
    import subprocess
    import sys

    import nbformat

    (tmp_path / "notebooks").mkdir()
    nbformat.write(notebook, tmp_path / "notebooks" / "00_t.ipynb")
    (tmp_path / "index.md").write_text("# Home\n")
    for machine in ("cpu-x", "h100-y"):
        (tmp_path / "results" / machine).mkdir(parents=True)
    (tmp_path / "conf.py").write_text(
        f"import sys\nfrom pathlib import Path\nsys.path.insert(0, {str(ROOT / 'tools')!r})\nimport book\n"
        f"book.NOTEBOOKS, book.RESULTS = Path({str(tmp_path / 'notebooks')!r}), Path({str(tmp_path / 'results')!r})\n"
        "extensions = ['myst_nb']\nnb_execution_mode = 'off'\nroot_doc = 'index'\nexclude_patterns = ['out', 'results']\n"
        "html_theme = 'sphinx_book_theme'\n"
        f"html_static_path, html_css_files = [{str(ROOT / 'book' / 'static')!r}], ['book.css']\n"
        "\ndef setup(app):\n    book.setup(app)\n")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html", str(tmp_path), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return (tmp_path / "out" / "notebooks" / "00_t.html").read_text()


def test_a_lesson_page_folds_its_setup_and_its_deep_dive_and_says_what_full_mode_measures(tmp_path):
    """The page of a lesson in the course's layout (tools/notebooks.py): the setup cell folded under
    the lesson's introduction, its output read into the "Measured on" box with the full-mode line;
    a deep dive (issue 31, pacing) folded whole, text and code, under its visible heading; a worked
    solution folded, input and output."""
    needs_the_book_group()
    bs4 = pytest.importorskip("bs4")
    import nbformat

    notebooks = load("notebooks")
    b = book()
    code, md = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
    folded = {"jupyter": {"outputs_hidden": True, "source_hidden": True}}
    setup_out = ("machine: AMD EPYC (2 cores), no GPU, torch 2.11.0\n"
                 "device:  cpu   mode: quick (GPUFEED_QUICK=1: tiny sizes)\n")
    nb = nbformat.v4.new_notebook(cells=[
        md("# 00 · T\n\n**What you will learn:** the first idea."),
        code("import gpufeed\n\nS = gpufeed.setup()", metadata={"tags": list(notebooks.SETUP_TAGS)},
             outputs=[nbformat.v4.new_output("stream", text=setup_out)]),
        md("## 1. The main line\n\nMain text."),
        md(f"{notebooks.DEEPER_HEADING}grain sizes\n\nSkip this on a first reading."),
        md("Why the grain matters, with ``` in it.\n\n#### A sub-heading\n\nMore.", metadata={"tags": ["deeper"]}),
        code("print('deep result')", metadata={"tags": ["deeper", "hide-cell"], **folded},
             outputs=[nbformat.v4.new_output("stream", text="deep result\n")]),
        md("Still deeper text.", metadata={"tags": ["deeper"]}),
        md("Back on the main line."),
        code("print('main result')", outputs=[nbformat.v4.new_output("stream", text="main result\n")]),
        code("print('the answer')", metadata={"tags": ["solution", "hide-cell"], **folded},
             outputs=[nbformat.v4.new_output("stream", text="the answer\n")]),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    page = bs4.BeautifulSoup(build_fixture_site(tmp_path, nb), "html.parser")
    article = page.select_one("article")

    setup = article.select_one("div.cell.tag_setup")
    fold = setup.select_one("details.hide:not([open])")
    assert fold and fold.select_one(".cell_input") and b.SETUP_PROMPTS[0] in fold.summary.get_text(), \
        "the setup cell is not folded under its own label"
    note = article.select_one(".machine-note").get_text(" ", strip=True)
    assert "(device cpu, quick mode)" in note and "1280x960" in note
    links = {a.get_text(): a["href"] for a in article.select(".machine-note a")}
    assert links == {"results/cpu-x/": f"{b.repo_url()}/tree/main/results/cpu-x",
                     "results/h100-y/": f"{b.repo_url()}/tree/main/results/h100-y",
                     "results/README.md": f"{b.repo_url()}/blob/main/results/README.md"}
    assert "h100-y/ (GPU)" in note and "cpu-x/ (GPU)" not in note

    dives = article.select("details.deeper")
    assert len(dives) == 1, "one fold for the deep dive's consecutive cells"
    dive = dives[0]
    assert "open" not in dive.attrs and b.DEEPER_PROMPTS[0] in dive.summary.get_text()
    inside = dive.get_text(" ")
    for text in ("Why the grain matters, with ``` in it.", "A sub-heading", "deep result", "Still deeper text."):
        assert text in inside, f"{text!r} is not in the deep dive's fold"
    assert not dive.select("details details") and not dive.select("div.cell details"), \
        "opened, the deep dive shows its code: no second fold inside"
    heading = dive.find_previous(["h1", "h2", "h3"])
    assert heading.get_text().startswith("Deeper (optional): grain sizes"), "the heading stays visible above"
    for text in ("Skip this on a first reading.", "Back on the main line.", "main result", "the first idea"):
        assert text in article.get_text(" ") and text not in inside, f"{text!r} is folded with the deep dive"

    # a worked solution (tags solution, hide-cell; source_hidden for JupyterLab): folded, input and
    # output, in a closed <details>
    solution = article.select_one("div.cell.tag_solution")
    fold = solution.select_one("details.hide:not([open])")
    assert fold and fold.select_one(".cell_input"), "the solution cell is not folded in a closed <details>"
    assert "the answer" in solution.get_text(), "the folded solution lost its output"


def test_the_examples_in_the_site_tools_hold():
    """tools/ is outside pytest's doctest paths: the examples of tools/book.py and tools/notebooks.py
    (the deep-dive marks and folds, the full-mode line, the line spans, the setup cell's tags) run here."""
    needs_the_book_group()
    import doctest
    import sys

    # tools/notebooks.py as book imported it (doctest matches functions to sys.modules by name)
    for module in (book(), sys.modules[book().repo_url.__module__]):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.attempted >= 1 and not result.failed, f"{module.__name__}: {result}"


def test_the_site_build_output_is_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/build/" in ignored and book().HTML.is_relative_to(ROOT / "build")


# ---------------------------------------------------------------------------------------------
# The built site in a real browser.


def unavailable(reason: str, hint: str):
    if os.environ.get("GPUFEED_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}: run `{hint}` (GPUFEED_REQUIRE_BROWSER=1 asks for this test to run)", pytrace=False)
    pytest.skip(f"{reason} (`{hint}`)")


@pytest.fixture(scope="module")
def site():
    """Serves build/book/html on 127.0.0.1; yields the base URL."""
    if not (SITE / "index.html").is_file():
        unavailable(f"no built site in {SITE.relative_to(ROOT)}", "make book")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    chromium = os.environ.get("GPUFEED_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(chromium, os.X_OK):
        unavailable(f"no Chromium at {chromium}", "make browser-deps")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                    "--disable-background-networking", "--disable-component-update"])
        yield b
        b.close()


@pytest.fixture
def page(browser, site):
    """A page that records every request and script error; requests off this machine are refused."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    page.outside, page.errors, page.failed = [], [], []
    page.route(re.compile(r"^(?!" + re.escape(site) + ")"), lambda route: (
        page.outside.append(route.request.url), route.abort()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("response", lambda r: r.status >= 400 and page.failed.append(f"{r.status} {r.url}"))
    yield page
    page.close()


def figures_drawn(page) -> int:
    """Output images that loaded and have a size (a broken image has naturalWidth 0)."""
    return page.evaluate("""() => [...document.querySelectorAll('.cell_output img')]
        .filter(img => img.complete && img.naturalWidth > 100 && img.naturalHeight > 100).length""")


def internal_links_resolve(page, site: str) -> list[str]:
    """Every link from this page to another page of the site, fetched: the ones that do not answer 200."""
    hrefs = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    targets = sorted({h.split("#")[0] for h in hrefs if h.startswith(site) and h.split("#")[0].endswith(".html")})
    assert targets, "no links to other pages"
    return [f"{r.status} {t}" for t in targets if (r := page.request.get(t)).status != 200]


#: A cell is folded when a closed <details> holds its code: its own (MyST-NB's hide-cell) or a deep
#: dive's, which folds all its cells at once (tools/book.py).
FOLDED = "cell => !!(cell.querySelector('details:not([open]) .cell_input') || cell.closest('details:not([open])'))"

#: The code blocks of the page in view that a reader cannot see whole, once every fold is opened:
#: a block past the lesson column's edge, a block whose overflow is clipped (nothing to scroll),
#: and a cell's code or printed output that scrolls where the site wraps it (book/static/book.css:
#: a cell's lines wrap, as JupyterLab wraps printed lines; a diagram in the text or an output table
#: keeps its layout and scrolls, with a visible scrollbar).
CUT_CODE = """() => {
    for (const d of document.querySelectorAll('article details')) d.open = true;
    const article = document.querySelector('article.bd-article');
    const edge = article.getBoundingClientRect().right;
    const cut = [];
    for (const pre of article.querySelectorAll('pre')) {
        const box = pre.getBoundingClientRect();
        if (box.width === 0) continue;  // not drawn
        const longest = pre.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
        const what = `${pre.scrollWidth}px in a ${pre.clientWidth}px box: ${longest.trim().slice(0, 90)}`;
        const over = pre.scrollWidth > pre.clientWidth + 1;
        const scrolls = ['auto', 'scroll'].includes(getComputedStyle(pre).overflowX);
        const wraps = pre.closest('div.cell_input, div.cell_output :is(.output.stream, .output.stderr, .output.text_plain)');
        if (box.right > edge + 1) cut.push(`past the column's edge by ${Math.round(box.right - edge)}px: ${what}`);
        else if (over && !scrolls) cut.push(`cut, nothing to scroll: ${what}`);
        else if (over && wraps) cut.push(`a cell's lines scroll instead of wrapping: ${what}`);
    }
    return cut;
}"""

#: A deep dive's fold is closed and sits in the section of its visible "Deeper (optional): ..." heading.
DIVE_FOLDED = r"""d => !d.open && /^Deeper \(optional\): \S/.test(
    d.closest('section').querySelector(':scope > :is(h2, h3, h4)').innerText)"""

#: What a reader gets who selects each cell's code on the page and copies it.
COPIED_CELLS = """() => [...document.querySelectorAll('article div.cell_input pre')].map(pre => {
    const range = document.createRange();
    range.selectNodeContents(pre);
    const selection = getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    return selection.toString();
})"""


def lesson_pages() -> list[str]:
    return sorted(p.stem for p in (SITE / "notebooks").glob("[0-9][0-9]_*.html"))


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 1920])
def test_every_lesson_opens_on_the_lesson_and_cuts_no_code(page, site, width):
    """Each lesson page, as a new reader opens it on a laptop (1280x900) and a wide screen (1920x1080):
    the title and the lesson's introduction in the first screen, the setup cell folded (no Colab
    installs before the first idea), and no code line cut at the column's edge, folds opened."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = {1280: 900, 1920: 1080}[width]
    page.set_viewport_size({"width": width, "height": height})
    stems = lesson_pages()
    assert len(stems) >= 13, f"lesson pages in the site: {stems}"
    for stem in stems:
        page.goto(f"{site}notebooks/{stem}.html")
        title = page.locator("article h1").first
        intro = page.locator("article p", has_text="What you will learn").first.bounding_box()
        assert title.inner_text().startswith(stem[:2] + " ·") and title.bounding_box()["y"] < height
        assert intro["y"] + intro["height"] <= height, f"{stem} at {width}px: the introduction is not in the first screen"
        setup = page.locator(".cell.tag_setup")
        assert setup.count() == 1 and setup.evaluate(FOLDED), f"{stem}: the setup cell is not folded"
        assert "google.colab" not in page.locator("article").inner_text(), f"{stem}: the Colab lines show"
        first_section = page.locator("article section section").first.bounding_box()["y"]
        code_before = [box for box in (c.bounding_box() for c in page.locator("article .cell_input").all()
                                       if c.is_visible()) if box["y"] < first_section]
        assert not code_before, f"{stem}: code shows before the lesson's first section"
        for dive in page.locator("article details.deeper").all():  # optional deep dives (issue 31, pacing)
            assert dive.evaluate(DIVE_FOLDED), f"{stem}: a deep dive is open, or not under its heading"
        if width == 1280:
            page.screenshot(path=str(ARTIFACTS / f"book-{stem}-{width}.png"))
        cut = page.evaluate(CUT_CODE)  # opens every fold
        assert not cut, f"{stem} at {width}px, code the reader cannot see whole:\n" + "\n".join(cut[:10])
        # Wrapped on the page, a cell's code copies as written (a learner pastes it into a notebook).
        cells = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())["cells"]
        sources = {"".join(c["source"]).strip() for c in cells if c["cell_type"] == "code"}
        copied = page.evaluate(COPIED_CELLS)
        assert len(copied) >= len(sources) - 1 and not [t for t in copied if t.strip() not in sources], \
            f"{stem}: a cell's code copied from the page differs from its source"
    assert not page.outside and not page.failed and not page.errors, (page.outside, page.failed, page.errors)


@pytest.mark.browser
def test_the_built_site_in_chromium(page, site):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    notebooks = load("notebooks")

    # The home page is the README, with every lesson in the navigation, in order.
    page.goto(f"{site}index.html")
    assert "feeding images to the GPU" in page.locator("h1").first.inner_text()
    nav = page.locator("nav.bd-links a").all_inner_texts()
    numbered = [t.strip()[:2] for t in nav if re.match(r"\d\d ·", t.strip())]
    assert numbered == sorted(numbered) and len(numbered) >= 13, f"lessons in the navigation: {nav}"
    assert page.locator("table").count() >= 1, "the README's lesson table is missing"
    assert not internal_links_resolve(page, site)
    deck = page.locator("a.deck-link")
    assert deck.count() == (SITE / "slides" / "index.html").is_file(), "the deck is in the site iff it is linked"
    if deck.count():  # the deck was built (make slides) before the site
        assert page.request.get(site + deck.get_attribute("href")).status == 200, "the deck's link is broken"
    page.screenshot(path=str(ARTIFACTS / "book-home.png"))

    for stem in LESSONS:
        page.goto(f"{site}notebooks/{stem}.html")
        title = page.locator("h1").first.inner_text()
        assert title.startswith(stem[:2] + " ·"), title
        note = page.locator(".machine-note").inner_text()
        assert re.search(r"measured on .+ \(device \w+, (site|quick) mode\)", note), f"{stem}: {note}"
        assert "Evidence on this page" in note, f"{stem}: no evidence box under 'Measured on'"
        assert figures_drawn(page) >= 1, f"{stem}: no figure drawn"
        assert page.locator("article table").count() >= 1, f"{stem}: no table"
        errors = page.locator(".cell_output .traceback, .cell_output .output.error, .cell_output .stderr").filter(
            has_text=re.compile("Traceback|Error"))
        assert errors.count() == 0, f"{stem}: an error output: {errors.first.inner_text()[:500]}"
        assert "Traceback (most recent call last)" not in page.locator("article").inner_text()
        hidden = page.locator(".cell.tag_hide-cell")
        for i in range(hidden.count()):  # solutions, setup, deep dives: folded until the reader opens them
            assert hidden.nth(i).evaluate(FOLDED), f"{stem}: folded cell {i} is open"
            assert not hidden.nth(i).locator(".cell_input").is_visible(), f"{stem}: folded cell {i} shows its code"
        colab = notebooks.badge(ROOT / "notebooks" / f"{stem}.ipynb").split("](")[-1].rstrip(")")
        assert page.locator(f'a[href="{colab}"]').count() >= 1, f"{stem}: no link to {colab}"
        assert not internal_links_resolve(page, site), stem
        page.screenshot(path=str(ARTIFACTS / f"book-{stem}.png"), full_page=False)

        # Next and previous go to the neighbouring lessons.
        number = int(stem[:2])
        page.locator("a.right-next").click()
        page.wait_for_load_state()
        assert page.locator("h1").first.inner_text().startswith(f"{number + 1:02d} ·"), page.url
        page.locator("a.left-prev").click()
        page.wait_for_load_state()
        assert page.url.endswith(f"notebooks/{stem}.html"), page.url

    # Search finds a lesson by a word of its text.
    page.goto(f"{site}search.html?q=memmap")
    page.locator("#search-results li a").first.wait_for()
    found = page.locator("#search-results li a").all_inner_texts()
    assert any("Memory-mapped" in t for t in found), f"search for memmap found {found}"

    assert not page.outside, f"the site fetched from outside this machine: {page.outside}"
    assert not page.failed, f"requests that failed: {page.failed}"
    assert not page.errors, f"script errors: {page.errors}"


def test_make_book_runs_the_lessons_in_site_mode_offline():
    """In CI `make book` is the notebooks' only run: site mode (its datasets first), offline, errors fail it."""
    makefile = (ROOT / "Makefile").read_text()
    assert "BOOK_MODE ?= site" in makefile
    target = makefile[makefile.index("\nbook:"):].split("\n\n")[0]
    assert "GPUFEED_MODE=$(BOOK_MODE) $(IN_NETNS)" in target and "tools/book.py execute" in target
    assert target.index("data prepare") < target.index("tools/book.py execute")
    assert "tools/book.py build" in target
    conf = (ROOT / "book" / "conf.py").read_text()
    assert "nb_execution_raise_on_error = True" in conf and 'nb_execution_mode = "cache"' in conf
    assert "ProcessData(r.pk, r.uri, cache, TIMEOUT_S, False)" in (ROOT / "tools" / "book.py").read_text(), \
        "execute must not allow errors"
