"""The workshop deck, ``slides/slides.md`` (Slidev).

Unmarked tests read the deck's source, its pins and its plots: fast, offline, no Node. The test
marked ``browser`` builds the deck with the pinned Slidev and opens it in headless Chromium
(``make test-browser``); it skips without Chromium or ``slides/node_modules`` unless
``GPUFEED_REQUIRE_BROWSER=1``, then it fails and says which make target installs what is missing.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLIDES = ROOT / "slides"
DECK = SLIDES / "slides.md"
PLOTS = ROOT / "assets" / "plots"
ARTIFACTS = ROOT / "out" / "test-artifacts"
LESSON_HEADING = re.compile(r"^# (\d\d) · (.+)$", re.M)
FRONTMATTER_LINE = re.compile(r"^[A-Za-z][\w-]*:")


@dataclass
class Slide:
    number: int  # 1-based, as Slidev counts (the URL's #/N)
    frontmatter: str
    body: str

    @property
    def notes(self) -> str:
        """The speaker notes: Slidev takes the slide's last HTML comment, when the slide ends with it."""
        text = self.body.rstrip()
        if not text.endswith("-->"):
            return ""
        return text[text.rindex("<!--") + 4: -3].strip()

    @property
    def shown(self) -> str:
        """What the audience sees: the body without the notes, code blocks and HTML comments."""
        text = re.sub(r"<!--.*?-->", "", self.body, flags=re.S)
        return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)

    @property
    def lessons(self) -> list[str]:
        """The lesson numbers in the slide's headings, e.g. ``["03"]``."""
        return [n for n, _ in LESSON_HEADING.findall(self.shown)]


def parse(text: str) -> tuple[str, list[Slide]]:
    """Splits a Slidev deck into its headmatter and slides, the way Slidev does for this deck.

    A line ``---`` outside code fences separates slides; when the next line is ``key: value``, the
    lines up to the following ``---`` are that slide's frontmatter.
    """
    lines = text.splitlines()
    assert lines[0] == "---", "slides.md must start with its headmatter (a line ---)"
    end = lines.index("---", 1)
    headmatter, slides, current, fence, i = "\n".join(lines[1:end]), [], [], False, end + 1
    frontmatter = headmatter
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = not fence
        if line == "---" and not fence:
            slides.append(Slide(len(slides) + 1, frontmatter, "\n".join(current)))
            current, frontmatter = [], ""
            if i + 1 < len(lines) and FRONTMATTER_LINE.match(lines[i + 1]):
                close = lines.index("---", i + 1)
                frontmatter, i = "\n".join(lines[i + 1: close]), close
        else:
            current.append(line)
        i += 1
    slides.append(Slide(len(slides) + 1, frontmatter, "\n".join(current)))
    return headmatter, slides


@functools.cache
def deck() -> tuple[str, list[Slide]]:
    return parse(DECK.read_text())


def image_sources(text: str) -> list[str]:
    return re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", text) + re.findall(r"!\[[^\]]*\]\(([^)\s]+)", text)


def deck_images() -> list[str]:
    """Every image the deck shows (HTML comments, such as the notes, left out)."""
    return image_sources(re.sub(r"<!--.*?-->", "", DECK.read_text(), flags=re.S))


@functools.cache
def generator():
    spec = importlib.util.spec_from_file_location("deck_plots", ROOT / "tools" / "deck_plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_splits_slides_and_frontmatter():
    head, slides = parse("---\ntheme: default\n---\n\n# A\n\n```\n---\n```\n\n---\nlayout: center\n---\n\n# B\n<!--\nsay B\n-->\n")
    assert head == "theme: default"
    assert [s.number for s in slides] == [1, 2]
    assert "```\n---\n```" in slides[0].body  # a --- inside a code block is not a separator
    assert slides[1].frontmatter == "layout: center"
    assert slides[1].notes == "say B" and slides[0].notes == ""


def test_separators_are_followed_by_a_blank_line_or_frontmatter():
    # Slidev reads the lines right after a separator as YAML frontmatter if it can: a heading there
    # (a YAML comment) made a whole slide vanish into frontmatter and broke the build.
    lines, fence = DECK.read_text().splitlines(), False
    for i, line in enumerate(lines[:-1]):
        fence = fence != line.startswith("```")
        if line == "---" and not fence and i > 0:
            nxt = lines[i + 1]
            assert nxt == "" or FRONTMATTER_LINE.match(nxt), (
                f"slides.md line {i + 2}: put a blank line after the slide separator (found {nxt!r})")


def test_headmatter_works_offline():
    head, _ = deck()
    assert re.search(r"^fonts:\n(  .*\n)*  provider: none$", head + "\n", re.M), \
        "headmatter must set fonts: provider: none (no Google fonts: the build and the tests run offline)"
    assert re.search(r"^routerMode: hash$", head, re.M), "routerMode: hash lets dist/ be served from any path"
    favicon = re.search(r"^favicon: (.+)$", head, re.M)
    assert favicon and not favicon.group(1).startswith("http"), "a local favicon (Slidev's default is on a CDN)"
    assert (SLIDES / "public" / favicon.group(1).removeprefix("./")).is_file()


def test_nothing_is_loaded_from_the_network():
    for path in (DECK, SLIDES / "style.css"):
        text = path.read_text()
        for src in image_sources(text) + re.findall(r"url\(([^)]+)\)", text) + re.findall(
                r"<(?:script|link|iframe)\b[^>]*(?:src|href)=\"([^\"]+)\"", text):
            assert not re.match(r"(https?:)?//", src.strip("'\"")), f"{path.name} loads {src} from the network"


def test_every_lesson_has_slides_in_order():
    _, slides = deck()
    numbers = [n for s in slides for n in s.lessons]
    notebooks = {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")}
    expected = sorted({f"{k:02d}" for k in range(13)} | notebooks)
    assert sorted(set(numbers)) == expected, f"lessons without a slide: {sorted(set(expected) - set(numbers))}"
    assert numbers == sorted(numbers), "the deck follows the lessons in order"


def test_title_agenda_and_closing_slides():
    _, slides = deck()
    assert slides[0].frontmatter.count("layout: cover") == 1 and slides[0].body.lstrip().startswith("# ")
    assert any(s.body.lstrip().startswith("# Agenda") for s in slides[:4])
    assert not slides[-1].lessons, "the last slide closes the deck"


def test_every_slide_has_speaker_notes():
    _, slides = deck()
    for s in slides:
        assert len(s.notes) >= 150, f"slide {s.number} needs speaker notes: what to say and what to ask"
    for lesson in {f"{k:02d}" for k in range(13)}:
        notes = " ".join(s.notes for s in slides if lesson in s.lessons)
        assert "Ask" in notes, f"lesson {lesson}'s notes should say what to ask the room"


def test_every_image_exists_and_is_made_by_the_generator():
    names = set(generator().registry())
    images = deck_images()
    assert len(images) >= 10
    for src in images:
        path = (SLIDES / src).resolve()
        assert path.is_file(), f"slides.md shows {src}, which does not exist"
        assert path.is_relative_to(ROOT / "results") or path.parent == PLOTS, (
            f"{src}: deck images live in assets/plots (tools/deck_plots.py) or results/ "
            "(slides/vite.config.ts lets the build read only those)")
        if path.parent == PLOTS:
            assert path.stem in names, f"{src} is not made by tools/deck_plots.py (--list shows what it makes)"


def test_every_generated_plot_is_committed():
    missing = [n for n in generator().registry() if not (PLOTS / f"{n}.png").is_file()]
    assert not missing, f"run .venv/bin/python tools/deck_plots.py {' '.join(missing)}"


def test_measured_plots_follow_the_committed_results():
    names = generator().registry()
    for lesson in generator().MEASURED:
        for path in (ROOT / "results").glob(f"*/{lesson}.json"):
            assert f"{lesson}-{path.parent.name}" in names


@pytest.mark.parametrize("name", ["lesson02-schedule", "lesson03-wire"])
def test_generator_output_is_up_to_date(tmp_path, name):
    # Two cheap plots re-rendered and compared with the committed ones, pixel by pixel (loosely:
    # another FreeType may move a pixel of text). The rest are checked by test_every_...committed.
    from PIL import Image, ImageChops, ImageStat

    (fresh,) = generator().render([name], out=tmp_path)
    a, b = Image.open(fresh).convert("RGB"), Image.open(PLOTS / f"{name}.png").convert("RGB")
    assert a.size == b.size, f"{name}.png is stale: run .venv/bin/python tools/deck_plots.py {name}"
    diff = sum(ImageStat.Stat(ImageChops.difference(a, b)).mean) / 3
    assert diff < 2.0, f"{name}.png is stale (mean difference {diff:.1f}): run tools/deck_plots.py {name}"


def test_no_hand_typed_measurements_on_slides():
    # Measured or simulated numbers reach the slides through the generator's plots, never as text.
    unit = re.compile(r"\d[\d,.]*\s*(x\b|images/s|GB/s|MB/s|ms\b|us\b|%)")
    for s in deck()[1]:
        found = unit.findall(s.shown)
        assert not found, f"slide {s.number} types a number by hand ({found}); draw it in tools/deck_plots.py"


def test_slidev_is_pinned_exactly_and_the_lockfile_agrees():
    package = json.loads((SLIDES / "package.json").read_text())
    lock = json.loads((SLIDES / "package-lock.json").read_text())
    deps = package["dependencies"]
    assert "@slidev/cli" in deps and any(k.startswith("@slidev/theme-") for k in deps)
    for name, version in {**deps, **package.get("overrides", {})}.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"pin {name} exactly (got {version!r})"
    assert lock["packages"][""]["dependencies"] == deps, "package-lock.json is stale: run npm install in slides/"
    for name, version in deps.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
    assert {"node_modules/", "dist/"} <= set((SLIDES / ".gitignore").read_text().split())


# ---------------------------------------------------------------------------------------------
# In a real browser: build the deck, serve it on localhost, screenshot it with headless Chromium.


def required(what: str, hint: str):
    if os.environ.get("GPUFEED_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{what}: run `{hint}` (GPUFEED_REQUIRE_BROWSER=1 asks for this test to run)")
    pytest.skip(f"{what} (`{hint}` installs it)")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves dist/, falls back to index.html for unknown paths (an SPA), remembers what it served."""

    served: list[tuple[str, int]]

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if not path.exists() and "." not in Path(self.path.split("?")[0]).name:
            self.path = "/index.html"
        return super().send_head()

    def log_request(self, code="-", size="-"):
        self.served.append((self.path.split("?")[0], int(code) if str(code).isdigit() else 0))


@pytest.fixture
def served(tmp_path):
    """Builds the deck into a temporary folder and serves it on 127.0.0.1: (base URL, served log)."""
    chromium()  # before the build: skip (or fail) at once where there is no browser
    slidev = SLIDES / "node_modules" / ".bin" / "slidev"
    if shutil.which("node") is None:
        required("Node.js is not installed", "make slides-deps")
    if not slidev.exists():
        required("slides/node_modules is missing", "make slides-deps")
    dist = tmp_path / "dist"
    build = subprocess.run([str(slidev), "build", "--out", str(dist), "--base", "./"], cwd=SLIDES,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"slidev build failed:\n{(build.stdout + build.stderr)[-3000:]}"
    assert (dist / "index.html").is_file()
    bundled = [p.name for p in (dist / "assets").glob("*.png")]  # e.g. lesson03-wire-PEyWqsL1.png
    for src in deck_images():
        stem = re.escape(Path(src).stem)
        assert any(re.fullmatch(rf"{stem}-[\w-]{{8}}\.png", name) for name in bundled), f"{src} is not in the built deck"
    log: list[tuple[str, int]] = []
    handler = functools.partial(type("Handler", (_Handler,), {"served": log}), directory=str(dist))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", log
    finally:
        server.shutdown()
        server.server_close()


def chromium() -> str:
    path = os.environ.get("GPUFEED_CHROMIUM", "/usr/bin/chromium")
    if shutil.which(path) is None:
        required(f"no Chromium at {path}", "make browser-deps")
    return path


def screenshot(url: str, out: Path, profile: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=1280,720",
           "--virtual-time-budget=15000", f"--screenshot={out}", url]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.is_file(), f"Chromium wrote no screenshot (exit {run.returncode}):\n{run.stderr[-2000:]}"
    return out


def colours(path: Path) -> tuple[int, float]:
    """Distinct colours and the pixels' standard deviation (a blank page has 1 and 0)."""
    from PIL import Image, ImageStat

    img = Image.open(path).convert("RGB")
    return len(img.getcolors(maxcolors=1 << 24)), max(ImageStat.Stat(img).stddev)


@pytest.mark.browser
def test_built_deck_renders_in_chromium(served, tmp_path):
    import numpy as np
    from PIL import Image

    base, log = served
    title = screenshot(f"{base}index.html#/1", ARTIFACTS / "slides-title.png", tmp_path / "profile")
    n, spread = colours(title)
    assert n > 30 and spread > 10, f"the title slide looks blank ({n} colours): see {title}"

    plot_slide = next(s for s in deck()[1] if any("lesson01-rates" in src for src in image_sources(s.body)))
    shot = screenshot(f"{base}index.html#/{plot_slide.number}", ARTIFACTS / "slides-plot.png", tmp_path / "profile")
    n, spread = colours(shot)
    assert n > 100 and spread > 10, f"slide {plot_slide.number} looks blank ({n} colours): see {shot}"
    assert any(path.endswith(".png") and "lesson01-rates" in path and code == 200 for path, code in log), \
        f"the browser never fetched the plot; it fetched {sorted({p for p, _ in log})}"
    # The plot's bars are the course's "copy" blue (#0072B2): many such pixels mean the image drew.
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)  # [H, W, 3]
    blue = int((np.abs(pixels - np.array([0x00, 0x72, 0xB2])).max(axis=-1) < 30).sum())
    assert blue > 5000, f"the plot did not draw on slide {plot_slide.number} ({blue} blue pixels): see {shot}"
