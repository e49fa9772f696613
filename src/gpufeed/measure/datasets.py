"""Every dataset the lessons and ``gpufeed bench`` generate, listed once and built at once.

:func:`prepare` builds them (:func:`datasets`) with every core, before they run (``python -m
gpufeed data prepare``; ``make test-gpu`` does it while the ``cuda`` tests run): a lesson then finds
its folders and memmaps already there (:func:`gpufeed.measure.synth.synth_folder` and
:func:`gpufeed.data.memmap.build_memmap` reuse what is built).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gpufeed.measure import pipelines
from gpufeed.measure.lessons import LESSONS, Dataset, workload_dataset
from gpufeed.measure.synth import synth_folder

__all__ = ["Dataset", "datasets", "prepare", "workload_dataset"]


def datasets(mode: str, cuda: bool) -> list[Dataset]:
    """Every dataset the lessons (:data:`gpufeed.measure.lessons.LESSONS`, in order) and the bench
    generate in ``mode`` (``"quick"``, ``"site"`` or ``"full"``; the bench's is full only in full mode), as their code asks for them (the same folder names and arguments, so
    that they find them built and reuse them).

    Each lesson's list is kept in step with its notebook by hand (``Lesson.sizes``): where a lesson
    changes its sizes, its list must follow, or the lesson builds its own again (``make test-gpu``
    names the folders that lessons built themselves). ``tests/test_gpurun.py`` checks every part of
    every path against the strings and f-strings of its lesson's source, and lesson 11's workloads
    against the lesson's own. Lesson 04's PNG and ``.npy`` folders are not here
    (``gpufeed.course.lesson04.formats`` writes them, one process each).

    Example:
        >>> [d.owner for d in datasets("quick", cuda=False)][:3]
        ['lesson00', 'lesson00', 'lesson01']
        >>> next(d for d in datasets("full", cuda=True) if d.owner == "lesson05").n
        64
    """
    out = [d for lesson in LESSONS for d in lesson.datasets(mode, cuda)]
    return out + [workload_dataset("bench", "bench", pipelines.workload(mode != "full", "cuda" if cuda else "cpu"))]


def prepare(root: str | os.PathLike, specs: list[Dataset], *, workers: int = 1,
            log=print) -> list[dict]:
    """Builds ``specs`` under ``root`` (the cache folder): every JPEG folder first, rendered by one
    pool of ``workers`` processes shared by all, then the memmaps (``workers`` decoders each).
    What is already there is reused. Returns one record per folder and memmap: ``path``,
    ``owner``, ``seconds``, ``reused``.
    """
    import multiprocessing as mp

    from gpufeed.data.memmap import build_memmap

    root = Path(root)
    done = []
    # The pool is gone before the first memmap: build_memmap forks its decoders, and a fork while
    # the pool's manager thread holds a lock could hang the child.
    with ProcessPoolExecutor(max(1, workers), mp_context=mp.get_context("spawn")) as pool:
        for d in specs:
            r = synth_folder(root / d.folder, d.n, d.size, d.quality, d.classes, workers=max(1, workers),
                             progress=False, pool=pool)
            done.append({"owner": d.owner, "path": d.folder, "seconds": round(r.seconds, 2), "reused": r.reused})
            log(f"{d.owner}: {d.folder} ({d.n} JPEGs {d.size[0]}x{d.size[1]}) "
                f"{'reused' if r.reused else f'built in {r.seconds:.1f} s'}")
    for d in specs:
        for path, size in d.memmaps:
            r = build_memmap(root / d.folder, root / path, size=size, workers=workers, reuse=True, progress=False)
            done.append({"owner": d.owner, "path": path, "seconds": round(r.seconds, 2), "reused": r.reused})
            log(f"{d.owner}: {path} (memmap {size[0]}x{size[1]}) {'reused' if r.reused else f'built in {r.seconds:.1f} s'}")
    return done
