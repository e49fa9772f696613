"""Where measurements are kept: this machine's, and the committed reference results of real GPUs.

A lesson saves what it measured with :func:`save_lesson` (under :func:`gpufeed.config.results_dir`,
one folder per machine), and a CPU-only machine shows a GPU's numbers with :func:`reference`,
read from the repository's ``results/<machine>/`` (e.g. ``results/h200/lesson00.json``); a
:class:`Reference` carries such measurements to a reader with their machine and source.

Example:
    >>> import os, tempfile
    >>> from gpufeed.measure.harness import Measurement
    >>> os.environ["GPUFEED_RESULTS"] = tempfile.mkdtemp()
    >>> path = save_lesson("demo", [Measurement("a", [1.0, 1.1])])
    saved: demo.json, in this machine's results folder
    >>> path.parent.parent == config.results_dir() and path.name
    'demo.json'
    >>> reference("no-such-lesson") is None
    True
    >>> gpu_reference("no-such-lesson") is None
    No CUDA here, and no GPU measurement of ours is committed (results/<gpu>/no-such-lesson.json):
    run this notebook on a GPU to see its numbers.
    No figure published elsewhere is kept for this cell either (results/published.json).
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpufeed import config
from gpufeed.measure import harness as bench
from gpufeed.measure import published
from gpufeed.measure.machine import machine_info, slug


@dataclass
class Reference:
    """Measurements, the machine they ran on, and where they come from, for a reader.

    Attributes:
        measurements: what was kept.
        machine: the machine record (:func:`gpufeed.measure.machine.machine_info`).
        source: "measured here", or the committed file and the date it was measured.

    Example:
        >>> Reference([], {"gpu": "NVIDIA H100 80GB HBM3", "cpu": "AMD EPYC"}, "measured here").hardware
        'NVIDIA H100 80GB HBM3'
    """

    measurements: list[bench.Measurement]
    machine: dict
    source: str

    @property
    def hardware(self) -> str:
        """The GPU's name where there is one, else the CPU's."""
        return self.machine.get("gpu") or self.machine.get("cpu") or "an unnamed machine"


def machine_dir(info: dict | None = None) -> Path:
    """This machine's folder in the results directory, e.g. ``.../results/cpu-epyc-7b13``."""
    return config.results_dir() / slug(info or machine_info())


def save_lesson(name: str, measurements, *, say: bool = True, **extra) -> Path:
    """Saves a lesson's measurements as ``<results>/<machine>/<name>.json``; returns the path.

    With ``say``, prints one line that says so, by the file's name: where this machine's results
    folder is differs from one machine to the next and is no part of the lesson (:func:`machine_dir`
    returns it, and ``results_dir`` in :mod:`gpufeed.config` says how to move it).
    """
    path = bench.save(machine_dir() / f"{name}.json", measurements, **extra)
    if say:
        print(f"saved: {path.name}, in this machine's results folder")
    return path


def reference_roots() -> list[Path]:
    """Folders that may hold committed reference results (the checkout's ``results/``)."""
    roots = []
    root = config.repo_root()
    if root is not None and (root / "results").is_dir():
        roots.append(root / "results")
    packaged = Path(__file__).with_name("_results")
    if packaged.is_dir():
        roots.append(packaged)
    return roots


def is_quick(doc: dict) -> bool:
    """Whether a saved document was measured in quick mode (tiny sizes: evidence that a lesson ran,
    not a reference). The flag is the document's own ``quick`` or its machine record's."""
    return bool(doc.get("quick") or (doc.get("machine") or {}).get("quick"))


def committed_files(name: str, keep=lambda doc: True) -> list[tuple[Path, list, dict]]:
    """Every committed full-mode reference for a lesson that ``keep`` accepts, as ``(path,
    measurements, document)``, **newest first** (by the date each was measured; a file without a
    date last), so that a GPU run committed later replaces an older one for a reader without a GPU.

    Quick-mode files are skipped wherever they are: a reference is measured in full mode.

    Args:
        name: the file's stem, e.g. ``"lesson00"``.
        keep: a test on the saved document, e.g. ``lambda doc: "dali" in doc``.
    """
    found = []
    for root in reference_roots():
        for path in sorted(root.glob(f"*/{name}.json")):
            ms, doc = bench.load(path)
            if not is_quick(doc) and keep(doc):
                found.append((path, ms, doc))
    return sorted(found, key=lambda f: str(f[2].get("date") or ""), reverse=True)  # stable: ties keep root order


def committed(name: str, keep=lambda doc: True):
    """:func:`committed_files` as ``(measurements, document)`` pairs, newest first."""
    for _, ms, doc in committed_files(name, keep):
        yield ms, doc


def measured_on(doc: dict) -> str | None:
    """The date a saved document was measured (``YYYY-MM-DD``, :func:`gpufeed.measure.harness.save`
    records it), or None for a file saved before it did: a learner reads a date, never the commit
    (which stays in the file's machine record for whoever maintains the course).

    Example:
        >>> measured_on({"date": "2026-11-26T09:12:00+00:00", "machine": {"commit": "305e292"}})
        '2026-11-26'
        >>> measured_on({"machine": {"commit": "305e292"}}) is None
        True
    """
    return str(doc["date"])[:10] if doc.get("date") else None


def has_gpu(doc: dict) -> bool:
    """Whether a saved document was measured on a machine with a GPU."""
    return bool((doc.get("machine") or {}).get("gpu"))


def reference(name: str, need_gpu: bool = True):
    """The committed reference for a lesson: ``(measurements, document)``, or None if none exists.

    Args:
        name: the file's stem, e.g. ``"lesson00"``.
        need_gpu: only take results measured on a machine with a GPU (what CPU-only learners lack).
    """
    return next(committed(name, has_gpu if need_gpu else (lambda doc: True)), None)


def gpu_reference(name: str):
    """What a CUDA-only cell shows on a machine without CUDA: our committed GPU reference, else
    the figures others published (:func:`gpufeed.measure.published.show`, labelled as theirs).

    Prints where the numbers come from (the GPU's name), or that none of ours is committed, how to
    make one and what others published, and returns :func:`reference`'s ``(measurements, document)``
    or None.
    """
    ref = reference(name)
    if ref is None:
        no_reference(name)
    else:
        print(f"No CUDA here: showing the reference measured on {ref[1]['machine'].get('gpu')}.")
    return ref


def no_reference(name: str) -> list:
    """Says that no GPU measurement of ours is committed for ``name`` and how to add one, then shows
    the figures others published for it; returns them (:class:`gpufeed.measure.published.Figure`)."""
    print(f"No CUDA here, and no GPU measurement of ours is committed (results/<gpu>/{name}.json):\n"
          "run this notebook on a GPU to see its numbers.")
    return published.show(name)
