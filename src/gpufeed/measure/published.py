"""Figures others published, for the cells that need a GPU where none of ours is committed.

A CUDA-only cell shows our own GPU measurement when one is committed (``results/<gpu>/lessonNN.json``,
:func:`gpufeed.measure.results.reference`). Where there is none, it shows what others published
about the same thing instead, each figure labelled as theirs: *published by ..., on <hardware>,
not measured here*, with the link. The figures are kept as data in one place,
``results/published.json`` (inside the wheel as ``gpufeed/measure/_results/published.json``, for
Colab), each with what exactly was measured and where the source says it, so that a reviewer can
check every one against its source.

Example:
    >>> figs = for_lesson("lesson00")
    >>> pinned = next(f for f in figs if f.id == "h2d-pinned-gtx680")
    >>> f"{pinned.figure:.2f} {pinned.unit}"
    '6.19 GB/s'
    >>> pinned.label()
    'published by NVIDIA Technical Blog, on GeForce GTX 680 with an Intel Core i7-3930K (desktop), not measured here'
    >>> for_lesson("no-such-lesson")
    []
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gpufeed import config

#: Bytes per second of each unit a published read rate may be given in, over 1e9 (GB/s).
GB_PER_UNIT = {"GB/s": 1.0, "GB/sec": 1.0, "MB/s": 1e-3, "MiB/s": 2**20 / 1e9, "MiBps": 2**20 / 1e9,
               "GiB/s": 2**30 / 1e9, "GiBps": 2**30 / 1e9}

#: Every field a figure must have (``note``, our reading of the source where it needs one, is optional).
FIELDS = ("id", "lessons", "figure", "unit", "measured", "hardware", "publisher", "title", "url", "quote")


@dataclass(frozen=True)
class Figure:
    """One published number: what it is, what it was measured on, and where it is said.

    Attributes:
        id: a short unique name, e.g. ``"h2d-pinned-gtx680"``.
        lessons: the results names whose CUDA cell shows it, e.g. ``("lesson00",)``.
        figure: the number as published (not rounded, not converted).
        unit: its unit as published, e.g. ``"GB/s"``, ``"images/s"``, ``"us per 1000 images"``.
        measured: what exactly was measured (operation, size, precision, threads).
        hardware: the machine it was measured on, as the source names it.
        publisher: who published it (a blog, a repository, a pull request's author).
        title: the source's title; url: its address.
        quote: where in the source the number stands, quoted.
        note: our reading of the source, where the figure needed one ("" if none).
    """

    id: str
    lessons: tuple[str, ...]
    figure: float
    unit: str
    measured: str
    hardware: str
    publisher: str
    title: str
    url: str
    quote: str
    note: str = ""

    def label(self) -> str:
        """``published by <publisher>, on <hardware>, not measured here``."""
        return f"published by {self.publisher}, on {self.hardware}, not measured here"

    def number(self) -> str:
        """The figure written as published (no rounding), with thousands separators: ``'2,470'``."""
        return f"{int(self.figure):,}" if self.figure.is_integer() else f"{self.figure:,}"

    @property
    def gb_per_s(self) -> float:
        """The figure, a published read or copy rate kept in its own unit, in GB/s (10^9 bytes/s).

        Raises:
            ValueError: the unit is not a rate listed in :data:`GB_PER_UNIT`.

        Example:
            >>> efs = next(f for f in load() if f.id == "efs-per-client-read-write")
            >>> f"{efs.number()} {efs.unit} = {efs.gb_per_s:.3f} GB/s"
            '512 MiBps = 0.537 GB/s'
        """
        if self.unit not in GB_PER_UNIT:
            raise ValueError(f"published figure {self.id!r}: its unit {self.unit!r} is not a rate this converts "
                             f"({', '.join(GB_PER_UNIT)}); add it to gpufeed.measure.published.GB_PER_UNIT")
        return self.figure * GB_PER_UNIT[self.unit]

    def reading(self) -> str:
        """The figure in a reader's units where its published unit is hard to take in, as words to
        put after it (``""`` otherwise): a time per N images becomes a time per image and images/s.

        Example:
            >>> f = lambda figure, unit: Figure("x", ("lesson04",), figure, unit, "", "", "", "", "", "")
            >>> f(2541465.3, "us per 1000 images").reading(), f(2470.0, "images/s").reading()
            (' (2.54 ms per image, 393 images/s)', '')
        """
        from gpufeed.measure.units import format_time

        m = re.fullmatch(r"us per ([\d,]+) images?", self.unit)
        if not m or self.figure <= 0:
            return ""
        per_image_s = self.figure * 1e-6 / int(m.group(1).replace(",", ""))
        return f" ({format_time(per_image_s)} per image, {1 / per_image_s:,.0f} images/s)"

    def text(self) -> str:
        """Lines for a notebook's output: the number and what it is (in a reader's units too, where
        :meth:`reading` has them); whose it is and the link; our reading of the source, where it
        needed one."""
        text = (f"{self.number()} {self.unit}{self.reading()}: {self.measured}\n"
                f"  {self.label()} · {self.title}: {self.url}")
        return text + (f"\n  ({self.note})" if self.note else "")


def default_path() -> Path:
    """``results/published.json`` of the checkout, else the copy inside the installed package."""
    root = config.repo_root()
    if root is not None and (root / "results" / "published.json").is_file():
        return root / "results" / "published.json"
    return Path(__file__).with_name("_results") / "published.json"


def load(path: Path | str | None = None) -> list[Figure]:
    """Reads and checks every figure of ``path`` (default: :func:`default_path`).

    Raises:
        ValueError: the file is missing, is not JSON, or a figure lacks a field, has a number that is
            not a number, a link that is not https, or an id used twice; the message names the file,
            the figure and what to fix.
    """
    path = Path(path) if path is not None else default_path()
    if not path.is_file():
        raise ValueError(f"{path}: no such file; it ships with the course repository (results/published.json)")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); fix the file, or restore it with git") from e
    figures, seen = [], set()
    for i, raw in enumerate(doc.get("figures", [])):
        where = f"{path}: figure {raw.get('id', f'#{i}')!r}"
        missing = [k for k in FIELDS if raw.get(k) in (None, "", [])]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}: every figure needs {', '.join(FIELDS)}")
        if isinstance(raw["figure"], bool) or not isinstance(raw["figure"], (int, float)):
            raise ValueError(f"{where}: 'figure' must be the number as published, not {raw['figure']!r}")
        if not str(raw["url"]).startswith("https://"):
            raise ValueError(f"{where}: 'url' must be an https:// link to the source, not {raw['url']!r}")
        if raw["id"] in seen:
            raise ValueError(f"{where}: the id is used twice; give each figure its own")
        seen.add(raw["id"])
        unknown = set(raw) - set(FIELDS) - {"note"}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}; the fields are {', '.join(FIELDS)}, note")
        figures.append(Figure(**{**raw, "lessons": tuple(raw["lessons"]), "figure": float(raw["figure"])}))
    return figures


def for_lesson(name: str, path: Path | str | None = None) -> list[Figure]:
    """The figures a lesson's CUDA cell shows (``name`` as in ``results/<gpu>/<name>.json``), in file order."""
    return [f for f in load(path) if name in f.lessons]


def show(name: str, path: Path | str | None = None) -> list[Figure]:
    """Prints the figures others published for ``name``, one a line, each labelled as theirs.

    Returns them, so that a cell can compute a ratio from the numbers themselves (never a copy).

    Example:
        >>> shown = show("lesson12")  # doctest: +ELLIPSIS
        Published elsewhere, for comparison (not measured here):
        - 2,470 images/s: ResNet-50 v1.5 training throughput in mixed precision on 1 GPU, ...
          published by NVIDIA DeepLearningExamples, on 1x A100 80GB in an NVIDIA DGX A100, not measured here · ResNet50 v1.5 For PyTorch (README): https://github.com/NVIDIA/...
        - 16,621 images/s: ...
        >>> round(shown[1].figure / shown[0].figure, 2)  # their 8 GPUs against their 1
        6.73
        >>> show("no-such-lesson")
        No figure published elsewhere is kept for this cell either (results/published.json).
        []
    """
    figures = for_lesson(name, path)
    if not figures:
        print("No figure published elsewhere is kept for this cell either (results/published.json).")
        return []
    print("Published elsewhere, for comparison (not measured here):")
    for f in figures:
        print(f"- {f.text()}")
    return figures
