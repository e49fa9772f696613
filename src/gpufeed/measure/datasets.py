"""Every dataset the lessons and ``gpufeed bench`` generate, listed once and built at once.

:func:`prepare` builds them (:func:`datasets`) with every core, before they run (``python -m
gpufeed data prepare``; ``make test-gpu`` does it while the ``cuda`` tests run): a lesson then finds
its folders and memmaps already there (:func:`gpufeed.measure.synth.synth_folder` and
:func:`gpufeed.data.memmap.build_memmap` reuse what is built).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpufeed.measure import pipelines
from gpufeed.measure.synth import synth_folder


@dataclass(frozen=True)
class Dataset:
    """A dataset that a lesson (or ``gpufeed bench``) generates in the cache folder, as its code asks
    for it: a JPEG folder, and the memmaps built from it.

    Attributes:
        owner: who builds it (``"lesson05"``, ``"bench"``). folder: its path under the cache folder.
        n, size, quality, classes: :func:`synth_folder`'s arguments.
        memmaps: ``(path under the cache folder, (width, height))`` of each memmap built from it.
    """

    owner: str
    folder: str
    n: int
    size: tuple[int, int]
    quality: int = 90
    classes: int | None = None
    memmaps: tuple[tuple[str, tuple[int, int]], ...] = field(default=())


def datasets(quick: bool, cuda: bool) -> list[Dataset]:
    """Every dataset the lessons and the bench generate in this mode, as their code asks for it
    (the same folder names and arguments, so that they find them built and reuse them).

    Kept in step with the notebooks by hand: where a lesson changes its sizes, this list must
    follow, or the lesson builds its own again (``make test-gpu`` names the folders that lessons
    built themselves). ``tests/test_gpurun.py`` checks every part of every path against the strings
    and f-strings of its lesson's source, and lesson 11's workloads against the lesson's own. Lesson
    04's PNG and ``.npy`` folders are not here (``gpufeed.course.formats`` writes them, one process
    each).

    Example:
        >>> [d.owner for d in datasets(quick=True, cuda=False)][:3]
        ['lesson00', 'lesson00', 'lesson01']
        >>> next(d for d in datasets(quick=False, cuda=True) if d.owner == "lesson05").n
        64
    """
    pick = (lambda q, f: q) if quick else (lambda q, f: f)  # noqa: E731  (config.pick for this mode)
    out = [Dataset("lesson00", f"lesson00-{w}x{h}-q90", pick(16, 256), (w, h)) for w, h in ((224, 224), (640, 480))]
    b, n01 = pick(8, 32), pick(6, 16)
    out.append(Dataset("lesson01", f"lesson01-224x224-q90-n{b * n01}", b * n01, (224, 224)))
    n02 = pick(8, 32) * pick(4, 16)
    out += [Dataset("lesson02", f"lesson02-224x224-q90-n{n02}", n02, (224, 224)),
            Dataset("lesson02", "lesson02-640x480-q90-n8", 8, (640, 480))]
    n04 = pick(16, 64)
    out += [Dataset("lesson04", f"lesson04-{w}x{h}-q90-n{n04}", n04, (w, h))
            for w, h in pick([(384, 384)], [(384, 384), (640, 480), (1280, 960)])]
    size04, ds04 = pick(((384, 384), 32), ((640, 480), 256))
    out += [Dataset("lesson04", f"lesson04-{size04[0]}x{size04[1]}-n{ds04}-q{q}", ds04, size04, quality=q) for q in (95, 75)]
    n05 = pick(256, 5000)
    out += [Dataset("lesson05", "lesson05/demo-jpeg", pick(16, 64), (320, 240), classes=4),
            Dataset("lesson05", f"lesson05/jpeg-224-{n05}", n05, (224, 224),
                    memmaps=((f"lesson05/mm-224-{n05}", (224, 224)), (f"lesson05/mm-112-{n05}", (112, 112))))]
    n07 = pick(64, 2000)
    out.append(Dataset("lesson07", f"lesson07/jpeg-224-{n07}", n07, (224, 224),
                       memmaps=((f"lesson07/mm-224-{n07}", (224, 224)),)))
    out.append(Dataset("lesson08", f"lesson08/jpeg-224-{pick(64, 512)}", pick(64, 512), (224, 224)))
    n09, s09 = pick(128, 2048), pick(96, 256)
    out.append(Dataset("lesson09", f"lesson09/jpeg-{s09}-{n09}", n09, (s09, s09),
                       memmaps=((f"lesson09/mm-{s09}-{n09}", (s09, s09)),)))
    n10, (j10, m10) = pick(64, 1024), pick(((160, 120), (160, 120)), ((640, 480), (320, 240)))
    out.append(Dataset("lesson10", f"lesson10/jpeg-{j10[0]}-{n10}", n10, j10,
                       memmaps=((f"lesson10/mm-{m10[0]}-{n10}", m10),)))
    w11 = pick(pipelines.Workload(n=64, jpeg_size=(96, 72), resize=40, crop=32, batch=16),
               pipelines.Workload(n=2048, jpeg_size=(640, 480), resize=256, crop=224, batch=128) if cuda
               else pipelines.Workload(n=128, jpeg_size=(640, 480), resize=192, crop=160, batch=16))
    out += [_workload_dataset("lesson11", "lesson11", w11),
            _workload_dataset("bench", "bench", pipelines.workload(quick, "cuda" if cuda else "cpu"))]
    n12, s12 = pick(256, 2048), pick(64, 160)
    out.append(Dataset("lesson12", f"lesson12/jpeg-{n12}", n12, (s12 + 16, s12 + 16), classes=10,
                       memmaps=((f"lesson12/mm-{n12}-{s12}", (s12, s12)),)))
    return out


def _workload_dataset(owner: str, root: str, w) -> Dataset:
    """The dataset :func:`gpufeed.measure.pipelines.prepare` makes for workload ``w`` under ``root``."""
    jpeg, memmap = w.folders()
    return Dataset(owner, f"{root}/{jpeg}", w.n, w.jpeg_size, w.quality, w.classes,
                   memmaps=((f"{root}/{memmap}", (w.resize, w.resize)),))


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
