"""The course as a static site (`make book`): every lesson executed in site mode on this machine.

Site mode (``GPUFEED_MODE=site``, :func:`gpufeed.config.mode`) sizes each measurement so that the
verdicts a page prints are decided on a 2-core machine wherever the effect is real; ``make test``'s
quick mode only shows that a lesson runs. Two steps, so that each lesson runs once and an unchanged
one never again::

    python tools/book.py execute [--jobs N]   # run the lessons jupyter-cache lacks (GPUFEED_MODE=site)
    python tools/book.py build                # Sphinx + MyST-NB from that cache into build/book/html

``execute`` keeps a jupyter-cache under ``build/book/cache/<key>``; a lesson is looked up by the
hash of its code cells, and ``<key>`` hashes what else makes its numbers (the gpufeed package's
source, ``uv.lock``, the mode), so a change to the library runs every lesson again and the site
never shows numbers from code that is no longer there. A lesson whose cell raises stops the build
with the lesson's name and traceback, as nbmake would; so does an output a learner should not read
(:func:`output_problems`: a stderr block, a path of this machine, maintainers' jargon). ``--jobs 2`` runs two lessons at a time
(less wall time, but the two then share the cores they measure; the default, 1, gives each lesson
the machine to itself, which is what the numbers on the site claim).

``build`` runs Sphinx afresh (``-E``: the hooks below change pages in ways their sources do not
show) with ``book/conf.py``, whose hooks (:func:`setup`) make the README the home page with the
lessons in order, put "measured on <machine>" at the top of every lesson (read from the lesson's
own setup cell output, which the page folds: it opens on the lesson), with one line on what the
modes measure and where the figures of real machines are, and the lesson's evidence box
(:mod:`gpufeed.measure.evidence`: its headline claims and where each one's evidence comes from), fold each optional deep dive into one closed block
under its visible heading, turn the Colab badge into a plain link (the badge image would be
fetched from Colab at view time), and copy the built slide deck (``slides/dist``, `make slides`)
into the site when it is there. Warnings fail the build (a broken link between lessons is one).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import html
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "build" / "book"
HTML = BUILD / "html"
DECK = ROOT / "slides" / "dist"
RESULTS = ROOT / "results"
TIMEOUT_S = 900  # per lesson, as `make test` gives nbmake
#: The setup cell (tools/notebooks.py) prints these two lines: the page header reads them.
MACHINE_LINE = re.compile(r"^machine: (.+)$", re.M)
MODE_LINE = re.compile(r"^device:\s+(\S+)\s+mode: (\w+)", re.M)
#: How ipywidgets' containers print themselves (the text a widget output keeps for a static page).
WIDGET_REPR = re.compile(r"^(interactive|VBox|HBox|Box)\(children=\(")
#: An HTML tag in a line of highlighted code.
TAG = re.compile(r"<[^>]*>")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpufeed.measure.lessons import LESSONS  # noqa: E402  (the one list of lessons)
from notebooks import DEEPER_TAG, SETUP_TAGS, repo_url  # noqa: E402  (tools/notebooks.py: the layout's names)

#: The class a deep dive's markdown cells get on the page (MyST-NB passes markdown cells through
#: without their tags: :func:`mark_deeper_markdown`); their tag is tools/notebooks.py's DEEPER_TAG.
DEEPER_TEXT = "deeper-text"
#: The folds' labels: the setup cell (tagged "setup" by tools/notebooks.py) and a deep dive.
SETUP_PROMPTS = ("Show the setup cell (what it printed is in the box above)", "Hide the setup cell")
DEEPER_PROMPTS = ("Show the deep dive", "Hide the deep dive")


def lessons() -> list[Path]:
    """The generated lesson notebooks in :data:`NOTEBOOKS`, in course order (the registry's,
    :mod:`gpufeed.measure.lessons`); a folder that holds none of the registry's (a test's fixture
    site) lists its own numbered notebooks."""
    registered = [path for x in LESSONS if (path := NOTEBOOKS / Path(x.notebook).name).is_file()]
    return registered or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


#: The modes a site may be built in: site (what is published) or quick (a check that every page builds).
SITE_MODES = ("site", "quick")


def cache_key() -> str:
    """A hash of what a lesson's outputs depend on besides its own code cells."""
    from gpufeed import config

    h = hashlib.sha256(config.mode().encode())
    for path in sorted((ROOT / "src" / "gpufeed").rglob("*.py")) + [ROOT / "uv.lock"]:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def cache_dir() -> Path:
    return BUILD / "cache" / cache_key()


def _run_one(data):
    """One lesson in a worker process (jupyter-cache's own worker: runs it in notebooks/, caches it)."""
    from jupyter_cache.executors.basic import ExecutionWorkerLocalMProc

    return ExecutionWorkerLocalMProc()(data)


def execute(jobs: int = 1) -> int:
    """Runs every lesson the cache lacks; returns 0, or 1 after naming the lessons that failed."""
    from gpufeed import config

    if config.mode() not in SITE_MODES:
        print("book: set GPUFEED_MODE=site (make book does; GPUFEED_QUICK=1 for a quick check): full mode would "
              "take hours on this machine", file=sys.stderr)
        return 2
    from jupyter_cache import get_cache
    from jupyter_cache.executors.basic import ProcessData

    here = cache_dir()
    for old in here.parent.glob("*"):
        if old != here:
            print(f"book: the package or uv.lock changed since {old.name}: every lesson runs again")
            shutil.rmtree(old)
    os.environ["GPUFEED_PROGRESS"] = "0"  # the kernels inherit it: a page keeps results, not progress bars
    cache = get_cache(str(here))
    # The project lists notebooks by absolute path: forget those of another checkout (a cache copied
    # from elsewhere, as CI restores it) or of a renamed lesson, whose outputs stay matched by hash.
    current = {str(nb) for nb in lessons()}
    for record in cache.list_project_records():
        if record.uri not in current:
            cache.remove_nb_from_project(record.pk)
    for nb in sorted(current):
        cache.add_nb_to_project(nb)
    todo = sorted(cache.list_unexecuted(), key=lambda r: r.uri)
    print(f"book: {len(lessons()) - len(todo)} lessons cached, {len(todo)} to run in {config.mode()} mode "
          f"({jobs} at a time)", flush=True)
    work = [ProcessData(r.pk, r.uri, cache, TIMEOUT_S, False) for r in todo]
    start = time.perf_counter()
    if jobs > 1 and len(work) > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(_run_one, work, chunksize=1)
    else:
        results = [_run_one(d) for d in work]
    failed = [uri for code, uri in results if code != 0]
    for code, uri in results:
        if code == 0:
            seconds = cache.get_cached_project_nb(uri).data.get("execution_seconds", float("nan"))
            print(f"book: ran {Path(uri).name} in {seconds:.1f} s")
    for uri in failed:
        record = cache.get_project_record(uri)
        print(f"book: {Path(uri).name} failed:\n{record.traceback or '(no traceback: see above)'}", file=sys.stderr)
    print(f"book: executed {len(work) - len(failed)} of {len(work)} in {time.perf_counter() - start:.0f} s", flush=True)
    if failed:
        return 1
    # Every lesson's outputs, the cached ones too: what the site shows is what a learner reads.
    executed = {Path(uri).name: cache.merge_match_into_file(uri)[1] for uri in sorted(current)}
    problems = check_outputs(executed)
    if problems:
        print(f"book: {problems} outputs show what a learner should not read (above): keep a library's notes "
              "off the page (gpufeed.setup), word an error as one line, name no path of this machine", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# What a learner reads in a lesson's outputs: no stderr block, no path of this machine, no
# maintainers' words (the site shows these outputs; a learner's own run prints the same).

#: A path that belongs to one machine, wherever it is printed: a home or temporary folder, a
#: virtual environment, an installed package's file. :func:`machine_paths` adds this machine's own.
MACHINE_PATH = re.compile(r"(?<![\w.~])(?:/tmp/|/var/tmp/|/home/\w|/root/|/Users/\w|[A-Za-z]:\\Users\\)"
                          r"|(?<![\w-])\.venv\b|\bsite-packages\b|\bdist-packages\b")
#: The maintainers' words, by kind. GPUFEED_QUICK and GPUFEED_MODE are no maintainers' words: they are
#: the learner's switches between modes, which the README and every lesson's setup cell name; the
#: course's other variables (GPUFEED_RESULTS, GPUFEED_MEASURE_S, ...) are for whoever maintains it.
JARGON = {
    "commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"),
    "issue number": re.compile(r"\bissues? #?\d+", re.I),
    "pull request": re.compile(r"\b(?:pull request|PR) ?#\d+", re.I),
    "maintainers' variable": re.compile(r"\bGPUFEED_(?!(?:QUICK|MODE)\b)[A-Z0-9_]+"),
}
#: A web address: a link to a published source may pin the commit it cites (a permalink); that
#: is a citation, not the course's jargon, so :data:`JARGON` is looked for outside addresses.
URL = re.compile(r"https?://[^\s)\]>\"']+")
#: What of an output a learner reads: its text, in every form the page may show.
TEXT_MIMES = ("text/plain", "text/markdown", "text/html", "text/latex")


def machine_paths() -> list[str]:
    """This machine's own folders that an output must not name: the checkout, the home and
    temporary folders, the Python environment, gpufeed's cache folder (``GPUFEED_CACHE``)."""
    import tempfile

    from gpufeed import config

    places = {ROOT, Path.home(), Path(tempfile.gettempdir()), Path(sys.prefix), config.cache_dir()}
    return sorted({str(p) for p in places if len(p.parts) > 1}, key=len, reverse=True)


def output_text(output: dict) -> str:
    """The text of one cell output that a page shows (a stream's, or a result's text forms)."""
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif output.get("output_type") == "error":
        text = "\n".join(output.get("traceback", []))
    else:
        text = "\n".join(output.get("data", {}).get(m, "") if isinstance(output.get("data", {}).get(m, ""), str)
                         else "".join(output["data"][m]) for m in TEXT_MIMES)
    return "".join(text) if isinstance(text, list) else text


def output_problems(notebook: dict, places: list[str] | None = None) -> list[tuple[int, str, str]]:
    """What a learner must not read in an executed notebook's outputs, as ``(cell, kind, excerpt)``:
    a stderr block (a warning or a library's log line: the lesson or :func:`gpufeed.setup` should
    have kept it off the page, or caught and worded it), an error output, a path of this machine
    (:data:`MACHINE_PATH` and ``places``, by default :func:`machine_paths`) and maintainers' jargon
    (:data:`JARGON`). ``cell`` counts from 0 over all cells, as ``notebook["cells"]`` does.

    Example:
        >>> out = lambda **o: {"cell_type": "code", "source": "", "outputs": [o]}
        >>> nb = {"cells": [out(output_type="stream", name="stdout", text="saved: lesson00 (2 cores)\\n"),
        ...                 out(output_type="stream", name="stderr", text="UserWarning: careful\\n"),
        ...                 out(output_type="display_data", data={"text/plain": "saved to /srv/me/x.json"}),
        ...                 out(output_type="stream", name="stdout", text="GPUFEED_QUICK=1 at commit 305e292")]}
        >>> for problem in output_problems(nb, places=["/srv/me"]):
        ...     print(problem)
        (1, 'stderr block', 'UserWarning: careful')
        (2, 'machine path', 'saved to /srv/me/x.json')
        (3, 'commit hash', '305e292')
    """
    places = machine_paths() if places is None else places
    here = re.compile("|".join(re.escape(p) + r"(?![\w.-])" for p in places)) if places else None
    problems = []
    for i, cell in enumerate(notebook.get("cells", [])):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            text = output_text(output)
            if output.get("output_type") == "error":
                problems.append((i, "error output", f"{output.get('ename')}: {output.get('evalue')}"[:120]))
                continue
            if output.get("output_type") == "stream" and output.get("name") == "stderr" and text.strip():
                problems.append((i, "stderr block", text.strip().splitlines()[0][:120]))
                continue  # one block, one problem: what it says is the library's noise, not the lesson's
            paths = [m.group(0) for m in here.finditer(text)] if here else []
            paths += [m.group(0) for m in MACHINE_PATH.finditer(text)]
            seen = set()
            for path in paths:
                line = next(ln for ln in text.splitlines() if path in ln).strip()
                if line not in seen:  # a line naming two of this machine's folders is one path
                    seen.add(line)
                    problems.append((i, "machine path", line[:120]))
            prose = URL.sub(" ", text)
            for kind, pattern in JARGON.items():
                problems += [(i, kind, m.group(0)) for m in pattern.finditer(prose)]
    return problems


def check_outputs(notebooks: dict[str, dict]) -> int:
    """Prints what :func:`output_problems` finds in each executed lesson (``{name: notebook}``),
    with a count per kind; returns how many problems there are in all."""
    total = 0
    for name, nb in notebooks.items():
        problems = output_problems(nb)
        total += len(problems)
        if problems:
            counts = ", ".join(f"{n} {kind}" for kind, n in
                               sorted(collections.Counter(k for _, k, _ in problems).items()))
            print(f"book: {name} shows a learner what is not theirs to read ({counts}):", file=sys.stderr)
            for cell, kind, excerpt in problems:
                print(f"  cell {cell}: {kind}: {excerpt}", file=sys.stderr)
    return total


def build() -> int:
    """Sphinx into build/book/html (warnings are errors), the deck beside it, index.html at the top."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-c", str(ROOT / "book"), "-W", "--keep-going",
           "-q", "-d", str(BUILD / "doctrees"), str(ROOT), str(HTML)]
    if subprocess.run(cmd, cwd=ROOT).returncode:
        print("book: the Sphinx build failed (see the warnings above)", file=sys.stderr)
        return 1
    shutil.rmtree(HTML / "slides", ignore_errors=True)  # no deck left from an earlier build
    if (DECK / "index.html").is_file():
        shutil.copytree(DECK, HTML / "slides")
    # GitHub Pages (and a plain file server) open index.html; the home page is README.html, in the
    # same folder, so a copy of it keeps every relative link.
    shutil.copyfile(HTML / "README.html", HTML / "index.html")
    print(f"book: site in {HTML.relative_to(ROOT)} ({time.perf_counter() - start:.0f} s); "
          f"open {HTML.relative_to(ROOT)}/index.html")
    return 0


# ---------------------------------------------------------------------------------------------
# Sphinx hooks (book/conf.py calls setup).


def home_page_tail(deck_built: bool) -> str:
    """What the README gains as the site's home page: the lessons as the book's table of contents,
    and the workshop deck."""
    entries = "\n".join(f"{nb.parent.name}/{nb.stem}" for nb in lessons())
    if deck_built:
        deck = ("The workshop deck, built from the same plots: "
                '<a class="deck-link" href="slides/index.html">open the slides</a>.')
    else:
        deck = "The workshop deck is not in this build: run `make slides`, then `make book` again."
    return (f"\n\n## The workshop deck\n\n{deck}\n\n"
            f"```{{toctree}}\n:hidden:\n:caption: Lessons\n\n{entries}\n```\n")


def link_files_to_repository(markdown: str) -> str:
    """Points the README's links to files that are not pages of the site (LICENSE, the photos'
    licences) at the repository, from its one address; links to lessons and anchors stay.

    Example:
        >>> link_files_to_repository("[a](LICENSE), [b](notebooks/00_setup.ipynb), [c](#x), [d](https://e.org)")
        '[a](https://github.com/gpufeed/gpufeed/blob/main/LICENSE), [b](notebooks/00_setup.ipynb), [c](#x), [d](https://e.org)'
    """
    pages = {f"notebooks/{nb.name}" for nb in lessons()}

    def fix(m: re.Match) -> str:
        target = m.group(1)
        if target in pages or re.match(r"#|[a-z]+:", target):
            return m.group(0)
        return f"]({repo_url()}/blob/main/{target})"

    return re.sub(r"\]\(([^)\s]+)\)", fix, markdown)


def mark_deeper_markdown(ipynb: str) -> str:
    """Wraps each markdown cell tagged "deeper" in a container of class :data:`DEEPER_TEXT`, the
    mark :func:`fold_deep_dives` finds on the page (its headings become rubrics: a deep dive's
    structure is its visible "### Deeper (optional): ..." heading); other notebooks pass unchanged.

    Example:
        >>> cell = {"cell_type": "markdown", "metadata": {"tags": ["deeper"]}, "source": ["Uses ```x```."]}
        >>> out = json.loads(mark_deeper_markdown(json.dumps({"cells": [cell]})))
        >>> print(out["cells"][0]["source"])
        ````{container} deeper-text
        Uses ```x```.
        ````
    """
    notebook = json.loads(ipynb)
    marked = 0
    for cell in notebook.get("cells", []):
        if cell["cell_type"] == "markdown" and DEEPER_TAG in cell.get("metadata", {}).get("tags", []):
            text = "".join(cell["source"])
            fence = "`" * max([3, *(len(run) + 1 for run in re.findall(r"`+", text))])
            cell["source"] = f"{fence}{{container}} {DEEPER_TEXT}\n{text}\n{fence}"
            marked += 1
    return json.dumps(notebook, ensure_ascii=False) if marked else ipynb


def _source_read(app, docname: str, source: list[str]) -> None:
    if docname == app.config.root_doc:
        source[0] = link_files_to_repository(source[0]) + home_page_tail((DECK / "index.html").is_file())
    elif str(app.env.doc2path(docname)).endswith(".ipynb"):
        source[0] = mark_deeper_markdown(source[0])


def machine_note(text: str, when: float | None, seconds: float | None) -> str:
    """The sentence at the top of a lesson, from its setup cell's output.

    Example:
        >>> out = "machine: AMD EPYC (2 cores), no GPU, torch 2.11.0\\ndevice:  cpu   mode: quick (...)"
        >>> machine_note(out, None, 61.0)
        'The numbers on this page were measured on AMD EPYC (2 cores), no GPU, torch 2.11.0 (device cpu, quick mode), in a 61 s run. Numbers from other machines are labelled with their hardware.'
    """
    machine, mode = MACHINE_LINE.search(text), MODE_LINE.search(text)
    if not machine or not mode:
        raise ValueError("the setup cell printed no 'machine:' and 'device: ... mode:' lines")
    run = f"in a {seconds:.0f} s run" if seconds else "in one run"
    if when:
        run += f" on {datetime.fromtimestamp(when):%Y-%m-%d}"
    return (f"The numbers on this page were measured on {machine.group(1)} (device {mode.group(1)}, "
            f"{mode.group(2)} mode), {run}. Numbers from other machines are labelled with their hardware.")


def committed_results() -> list[str]:
    """The machines whose runs are committed: the folders of ``results/`` (results/README.md)."""
    return sorted(p.name for p in RESULTS.iterdir() if p.is_dir()) if RESULTS.is_dir() else []


#: What each mode's numbers can carry, said under the machine note.
MODE_NOTES = {
    "site": "Site mode sizes each measurement so that this page's verdicts (faster, slower, the same) are decided "
            "on this machine where the effect is real; a sentence that says \"this run cannot tell\" could not "
            "tell here. ",
    "quick": "Quick mode (GPUFEED_QUICK=1) uses tiny sizes, only to show that the lesson runs: most of its "
             "verdicts read \"this run cannot tell\". ",
}


def mode_note(machines: list[str], mode: str = "site") -> list[tuple[str, str | None]]:
    """The line under the machine note, as (text, link or None) pieces: what this page's mode can
    carry, what full mode measures instead, and where the committed full-size and GPU figures are.

    Example:
        >>> pieces = mode_note(["cpu-epyc", "h100-80gb-hbm3"])
        >>> print("".join(text for text, _ in pieces))  # doctest: +ELLIPSIS
        Site mode sizes each measurement so that this page's verdicts ... Full mode (no GPUFEED_QUICK or GPUFEED_MODE, as a learner runs it) measures at the talks' sizes instead: images up to 1280x960 on a GPU, larger datasets, more repeats. Full-mode and GPU figures of real machines: results/cpu-epyc/, results/h100-80gb-hbm3/ (GPU); how they are made: results/README.md.
        >>> [link for _, link in pieces if link][-1]
        'https://github.com/gpufeed/gpufeed/blob/main/results/README.md'
    """
    pieces: list[tuple[str, str | None]] = [(MODE_NOTES.get(mode, ""), None), (
        "Full mode (no GPUFEED_QUICK or GPUFEED_MODE, as a learner runs it) measures at the talks' sizes instead: "
        "images up to 1280x960 on a GPU, larger datasets, more repeats. ", None)]
    if machines:
        pieces.append(("Full-mode and GPU figures of real machines: ", None))
        for i, name in enumerate(machines):
            pieces.append((f"results/{name}/", f"{repo_url()}/tree/main/results/{name}"))
            gpu = "" if name.startswith("cpu-") else " (GPU)"
            pieces.append((gpu + (", " if i < len(machines) - 1 else "; how they are made: "), None))
    else:
        pieces.append(("Where the figures of real machines go and how they are made: ", None))
    pieces += [("results/README.md", f"{repo_url()}/blob/main/results/README.md"), (".", None)]
    return pieces


def evidence_nodes(number: str, cuda: bool):
    """The lesson's evidence box as docutils nodes (:mod:`gpufeed.measure.evidence`, the same
    sources the notebook's setup cell shows): a rubric, then each claim with its sources.

    Example:
        >>> box = evidence_nodes("08", cuda=False)
        >>> box["classes"], box.astext().splitlines()[0]
        (['evidence'], 'Evidence on this page')
    """
    from docutils import nodes

    from gpufeed.measure import evidence
    from gpufeed.measure.lessons import lesson

    box = nodes.container(classes=["evidence"])
    box += nodes.rubric(text="Evidence on this page")
    claims = nodes.enumerated_list()
    for claim in lesson(number).claims:
        item = nodes.list_item("", nodes.paragraph(text=claim.says))
        found = nodes.bullet_list()
        for src in evidence.sources(claim, number, cuda):
            para = nodes.paragraph("", "", nodes.emphasis(text=src.kind), nodes.Text(f": {src.text}"))
            if src.link:
                para += [nodes.Text(" ("), nodes.reference("source", "source", refuri=src.link), nodes.Text(")")]
            found += nodes.list_item("", para)
        item += found
        claims += item
    box += claims
    return box


def fold_deep_dives(doctree) -> int:
    """Folds each run of consecutive deep-dive cells (code cells tagged "deeper", markdown cells
    marked by :func:`mark_deeper_markdown`) into one closed block under the deep dive's visible
    heading; opened, it shows the dive's text, code and outputs as the rest of the lesson (its code
    cells are not folded once more). Returns the number of blocks.

    Example:
        >>> from docutils import nodes
        >>> text = nodes.container("", nodes.paragraph(text="why"), classes=[DEEPER_TEXT])
        >>> code = nodes.container(nb_element="cell_code", classes=["cell", "tag_deeper"], hide_mode="all")
        >>> page = nodes.section("", nodes.title(text="Deeper (optional): x"), text, code, nodes.paragraph(text="on"))
        >>> fold_deep_dives(page), [type(n).__name__ for n in page.children], code.get("hide_mode")
        (1, ['title', 'HideCodeCellNode', 'paragraph'], None)
    """
    from docutils import nodes
    from myst_nb.sphinx_ import HideCodeCellNode

    def deeper(node) -> bool:
        return isinstance(node, nodes.container) and (DEEPER_TEXT in node["classes"] or (
            node.get("nb_element") == "cell_code" and f"tag_{DEEPER_TAG}" in node["classes"]))

    folds = 0
    for parent in {id(n.parent): n.parent for n in doctree.findall(deeper)}.values():
        children, run = [], []
        for child in [*parent.children, None]:
            if child is not None and deeper(child):
                child.attributes.pop("hide_mode", None)  # the block folds it
                run.append(child)
                continue
            if run:
                fold = HideCodeCellNode(prompt_show=DEEPER_PROMPTS[0], prompt_hide=DEEPER_PROMPTS[1],
                                        classes=["deeper"])
                fold.extend(run)
                children.append(fold)
                folds, run = folds + 1, []
            if child is not None:
                children.append(child)
        parent.children = []
        parent.extend(children)
    return folds


def check_no_error_output(doctree, docname: str) -> None:
    """Fails the build on an error output, including one a cell tagged ``raises-exception`` kept
    (nbclient lets those through): a lesson that shows an error catches it and prints it.

    Example:
        >>> from docutils import nodes
        >>> page = nodes.section("", nodes.literal_block("", "ValueError: no", classes=["output", "traceback"]))
        >>> check_no_error_output(page, "notebooks/99_x")
        Traceback (most recent call last):
        ...
        sphinx.errors.ExtensionError: notebooks/99_x: an error output on the page: ValueError: no
    """
    from docutils import nodes
    from sphinx.errors import ExtensionError

    for block in doctree.findall(nodes.literal_block):
        if "traceback" in block["classes"]:
            raise ExtensionError(f"{docname}: an error output on the page: {block.astext()[-500:]}")


def line_spans(lines):
    """Puts each line of code that Pygments' HTML formatter yields in ``<span class="line">``, with
    its indentation as ``--indent`` and its newline left outside: a cell's code wraps at the
    column's edge (book/static/book.css), and the rest of a wrapped line is indented under its own
    line's code, not at the margin. Copying the code gives the lines as written.

    Example:
        >>> list(line_spans([(0, "<pre>"), (1, '    <span class="k">return</span> x\\n'), (1, "\\n")]))
        [(0, '<pre>'), (1, '<span class="line" style="--indent:4ch">    <span class="k">return</span> x</span>\\n'), (1, '\\n')]
    """
    for kind, line in lines:
        body = line.removesuffix("\n")
        text = html.unescape(TAG.sub("", body))
        if kind != 1 or not text.strip():  # a blank line stays bare: an empty span would take no height
            yield kind, line
            continue
        indent = len(text) - len(text.lstrip(" "))
        yield kind, f'<span class="line" style="--indent:{indent}ch">{body}</span>{line[len(body):]}'


def line_formatter(base: type) -> type:
    """Sphinx's Pygments HTML formatter, with :func:`line_spans` around each line."""

    class LineFormatter(base):
        def wrap(self, source):  # Pygments' documented hook for wrapping the lines
            return super().wrap(line_spans(source))

    return LineFormatter


def _builder_inited(app) -> None:
    highlighter = getattr(app.builder, "highlighter", None)
    if app.builder.format == "html" and highlighter is not None:
        highlighter.formatter = line_formatter(highlighter.formatter)


def _doctree_read(app, doctree) -> None:
    from docutils import nodes
    from sphinx.errors import ExtensionError

    docname = app.env.docname
    if not docname.startswith("notebooks/"):
        return
    check_no_error_output(doctree, docname)
    # The Colab badge is an image on Colab's server: the site links the same address in words.
    for image in list(doctree.findall(nodes.image)):
        if "colab-badge" in image.get("uri", "") and isinstance(image.parent, nodes.reference):
            image.parent.replace(image, nodes.Text("Open in Colab"))
            image.parent["classes"].append("colab-link")
    # A widget's output is its repr (``interactive(children=(IntSlider(...``) without a kernel.
    for block in list(doctree.findall(nodes.literal_block)):
        if WIDGET_REPR.match(block.astext()):
            block.replace_self(nodes.paragraph(
                "", "", nodes.emphasis(text="Interactive widgets are here when the lesson runs in JupyterLab "
                                            "or Colab: they need a running kernel.")))
    outputs = [b.astext() for b in doctree.findall(nodes.literal_block) if MACHINE_LINE.search(b.astext())]
    if not outputs:
        raise ExtensionError(f"{docname}: no setup cell output with 'machine: ...' (was the lesson executed?)")
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_exec_data(app.env, docname) or {}
    note = nodes.admonition(classes=["machine-note"])
    note += nodes.title(text="Measured on")
    note += nodes.paragraph(text=machine_note(outputs[0], data.get("mtime"), data.get("runtime")))
    setup = MODE_LINE.search(outputs[0])
    full = nodes.paragraph(classes=["full-mode"])
    for text, link in mode_note(committed_results(), setup.group(2) if setup else "site"):
        full += nodes.reference(text, text, refuri=link) if link else nodes.Text(text)
    note += full
    registered = {x.stem: x.number for x in LESSONS}  # a test's fixture lesson has no claims to show
    if setup and docname.removeprefix("notebooks/") in registered:
        note += evidence_nodes(registered[docname.removeprefix("notebooks/")], cuda=setup.group(1).startswith("cuda"))
    section = doctree.next_node(nodes.section)
    section.insert(_after_introduction(section), note)  # the reader meets the lesson first, then its evidence
    # The setup cell folds (tools/notebooks.py tags it): the page opens on the lesson.
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") == "cell_code" and f"tag_{SETUP_TAGS[0]}" in cell["classes"] and cell.get("hide_mode"):
            cell["prompt_show"], cell["prompt_hide"] = SETUP_PROMPTS
    fold_deep_dives(doctree)


def _after_introduction(section) -> int:
    """Where the "Measured on" box goes in a lesson's first section: after its introduction (the
    "What you will learn" paragraph and the "Time:" line that follows it), so that the first screen
    opens on the lesson; right under the title where a page has no introduction.

    Example:
        >>> from docutils import nodes
        >>> s = nodes.section("", nodes.title(text="00 · Setup"), nodes.paragraph(text="What you will learn: x"),
        ...                   nodes.paragraph(text="Time: 10 minutes."), nodes.paragraph(text="The idea."))
        >>> _after_introduction(s), _after_introduction(nodes.section("", nodes.title(text="t")))
        (3, 1)
    """
    from docutils import nodes

    at = 1
    for i, child in enumerate(section.children[1:4], start=1):
        if isinstance(child, nodes.paragraph) and child.astext().startswith(("What you will learn", "Time:")):
            at = i + 1
    return at


def setup(app) -> None:
    app.connect("builder-inited", _builder_inited)
    app.connect("source-read", _source_read)
    # Before Sphinx's image collector (priority 500) sees the badge's remote image.
    app.connect("doctree-read", _doctree_read, priority=400)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="run the lessons the cache lacks (GPUFEED_MODE=site, or GPUFEED_QUICK=1)")
    run.add_argument("--jobs", type=int, default=1, help="lessons at a time (default 1: numbers undisturbed)")
    sub.add_parser("build", help="the site from the cache, into build/book/html")
    args = parser.parse_args(argv)
    return execute(args.jobs) if args.command == "execute" else build()


if __name__ == "__main__":
    sys.exit(main())
