"""The course as a static site (`make book`): every lesson executed in quick mode on this machine.

Two steps, so that each lesson runs once and an unchanged one never again::

    python tools/book.py execute [--jobs N]   # run the lessons jupyter-cache lacks (GPUFEED_QUICK=1)
    python tools/book.py build                # Sphinx + MyST-NB from that cache into build/book/html

``execute`` keeps a jupyter-cache under ``build/book/cache/<key>``; a lesson is looked up by the
hash of its code cells, and ``<key>`` hashes what else makes its numbers (the gpufeed package's
source, ``uv.lock``, quick mode), so a change to the library runs every lesson again and the site
never shows numbers from code that is no longer there. A lesson whose cell raises stops the build
with the lesson's name and traceback, as nbmake would. ``--jobs 2`` runs two lessons at a time
(less wall time, but the two then share the cores they measure; the default, 1, gives each lesson
the machine to itself, which is what the numbers on the site claim).

``build`` runs Sphinx afresh (``-E``: the hooks below change pages in ways their sources do not
show) with ``book/conf.py``, whose hooks (:func:`setup`) make the README the home page with the
lessons in order, put "measured on <machine>" at the top of every lesson (read from
the lesson's own setup cell output), turn the Colab badge into a plain link (the badge image would
be fetched from Colab at view time), and copy the built slide deck (``slides/dist``, `make slides`)
into the site when it is there. Warnings fail the build (a broken link between lessons is one).
"""

from __future__ import annotations

import argparse
import hashlib
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
TIMEOUT_S = 900  # per lesson, as `make test` gives nbmake
#: The setup cell (tools/notebooks.py) prints these two lines: the page header reads them.
MACHINE_LINE = re.compile(r"^machine: (.+)$", re.M)
MODE_LINE = re.compile(r"^device:\s+(\S+)\s+mode: (\w+)", re.M)
#: How ipywidgets' containers print themselves (the text a widget output keeps for a static page).
WIDGET_REPR = re.compile(r"^(interactive|VBox|HBox|Box)\(children=\(")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebooks import repo_url  # noqa: E402  (tools/notebooks.py: the repository's one address)


def lessons() -> list[Path]:
    """The generated lesson notebooks, in course order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def cache_key() -> str:
    """A hash of what a lesson's outputs depend on besides its own code cells."""
    h = hashlib.sha256(os.environ.get("GPUFEED_QUICK", "0").encode())
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
    if os.environ.get("GPUFEED_QUICK") != "1":
        print("book: set GPUFEED_QUICK=1 (make book does): the site shows the quick-mode run", file=sys.stderr)
        return 2
    from jupyter_cache import get_cache
    from jupyter_cache.executors.basic import ProcessData

    here = cache_dir()
    for old in here.parent.glob("*"):
        if old != here:
            print(f"book: the package or uv.lock changed since {old.name}: every lesson runs again")
            shutil.rmtree(old)
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
    print(f"book: {len(lessons()) - len(todo)} lessons cached, {len(todo)} to run ({jobs} at a time)", flush=True)
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
    return 1 if failed else 0


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


def _source_read(app, docname: str, source: list[str]) -> None:
    if docname == app.config.root_doc:
        source[0] = link_files_to_repository(source[0]) + home_page_tail((DECK / "index.html").is_file())


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
    section = doctree.next_node(nodes.section)
    section.insert(1, note)


def setup(app) -> None:
    app.connect("source-read", _source_read)
    # Before Sphinx's image collector (priority 500) sees the badge's remote image.
    app.connect("doctree-read", _doctree_read, priority=400)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="run the lessons the cache lacks (GPUFEED_QUICK=1)")
    run.add_argument("--jobs", type=int, default=1, help="lessons at a time (default 1: numbers undisturbed)")
    sub.add_parser("build", help="the site from the cache, into build/book/html")
    args = parser.parse_args(argv)
    return execute(args.jobs) if args.command == "execute" else build()


if __name__ == "__main__":
    sys.exit(main())
