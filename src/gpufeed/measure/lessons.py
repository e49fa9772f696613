"""The course's lessons, listed once: number, notebook, title, the datasets each generates, whether
its GPU figures are committed references, and how long it takes on a GPU.

Every reader takes the list from here: ``tools/notebooks.py`` (the "next lesson" footer),
``tools/book.py`` (the site's order), ``make test-gpu`` (``tools/gpurun/``: what it runs and its
time estimates), :mod:`gpufeed.measure.datasets` (what ``gpufeed data prepare`` builds) and the
README's lesson table (``tests/test_lessons.py``). It lives in ``measure/`` so that every room that
needs it may import it (``measure/`` never imports ``course/``; the tools import anything).

Example:
    >>> lesson("08").stem, lesson("08").notebook
    ('08_prefetch', 'notebooks/08_prefetch.ipynb')
    >>> [x.number for x in LESSONS if not x.references]
    ['00', '06']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufeed.measure import pipelines


@dataclass(frozen=True)
class Dataset:
    """A dataset that a lesson (or ``gpufeed bench``) generates in the cache folder, as its code asks
    for it: a JPEG folder, and the memmaps built from it.

    Attributes:
        owner: who builds it (``"lesson05"``, ``"bench"``). folder: its path under the cache folder.
        n, size, quality, classes: :func:`gpufeed.measure.synth.synth_folder`'s arguments.
        memmaps: ``(path under the cache folder, (width, height))`` of each memmap built from it.
    """

    owner: str
    folder: str
    n: int
    size: tuple[int, int]
    quality: int = 90
    classes: int | None = None
    memmaps: tuple[tuple[str, tuple[int, int]], ...] = field(default=())


#: ``pick(quick_value, full_value)`` for one mode, and whether the lesson runs on CUDA.
Sizes = Callable[[Callable, bool], list[Dataset]]


@dataclass(frozen=True)
class Lesson:
    """One lesson.

    Attributes:
        number: ``"08"``. stem: the notebook's name, ``"08_prefetch"`` (``notebooks/<stem>.py`` is
            its source, ``.ipynb`` the generated notebook). title: as the outline and the footer say it.
        references: whether a machine without a GPU shows this lesson's committed GPU run
            (``results/<gpu>/lessonNN.json``): then a GPU run keeps its full-mode results.
        gpu_s: estimated seconds on one H100 (16 cores), ``(quick mode, full mode)``: what
            ``make test-gpu`` plans with until a run on that GPU has timed it (stated defaults,
            from the run of 2026-11-26 where it measured them, else rounded up from the CPU).
        sizes: the datasets it generates, given ``pick`` and CUDA (see :func:`Lesson.datasets`).
    """

    number: str
    stem: str
    title: str
    references: bool
    gpu_s: tuple[float, float]
    sizes: Sizes = lambda pick, cuda: []  # noqa: E731

    @property
    def owner(self) -> str:
        return f"lesson{self.number}"

    @property
    def source(self) -> str:
        return f"notebooks/{self.stem}.py"

    @property
    def notebook(self) -> str:
        return f"notebooks/{self.stem}.ipynb"

    def datasets(self, quick: bool, cuda: bool) -> list[Dataset]:
        """The datasets this lesson generates in this mode, as its code asks for them (the same
        folder names and arguments, so that it finds them built and reuses them)."""
        return self.sizes((lambda q, f: q) if quick else (lambda q, f: f), cuda)


def workload_dataset(owner: str, root: str, w) -> Dataset:
    """The dataset :func:`gpufeed.measure.pipelines.prepare` makes for workload ``w`` under ``root``."""
    jpeg, memmap = w.folders()
    return Dataset(owner, f"{root}/{jpeg}", w.n, w.jpeg_size, w.quality, w.classes,
                   memmaps=((f"{root}/{memmap}", (w.resize, w.resize)),))


# Each lesson's datasets, kept in step with its source by hand: tests/test_gpurun.py checks every
# part of every path against the strings and f-strings of the lesson (lesson 11: its workloads).
def _l00(pick, cuda):
    return [Dataset("lesson00", f"lesson00-{w}x{h}-q90", pick(16, 256), (w, h)) for w, h in ((224, 224), (640, 480))]


def _l01(pick, cuda):
    n = pick(8, 32) * pick(6, 16)
    return [Dataset("lesson01", f"lesson01-224x224-q90-n{n}", n, (224, 224))]


def _l02(pick, cuda):
    n = pick(8, 32) * pick(4, 16)
    return [Dataset("lesson02", f"lesson02-224x224-q90-n{n}", n, (224, 224)),
            Dataset("lesson02", "lesson02-640x480-q90-n8", 8, (640, 480))]


def _l04(pick, cuda):
    n, (size, m) = pick(16, 64), pick(((384, 384), 32), ((640, 480), 256))
    return [*(Dataset("lesson04", f"lesson04-{w}x{h}-q90-n{n}", n, (w, h))
              for w, h in pick([(384, 384)], [(384, 384), (640, 480), (1280, 960)])),
            *(Dataset("lesson04", f"lesson04-{size[0]}x{size[1]}-n{m}-q{q}", m, size, quality=q) for q in (95, 75))]


def _l05(pick, cuda):
    n = pick(128, 5000)
    return [Dataset("lesson05", "lesson05/demo-jpeg", pick(16, 64), (320, 240), classes=4),
            Dataset("lesson05", f"lesson05/jpeg-224-{n}", n, (224, 224),
                    memmaps=((f"lesson05/mm-224-{n}", (224, 224)), (f"lesson05/mm-112-{n}", (112, 112))))]


def _l07(pick, cuda):
    n = pick(64, 2000)
    return [Dataset("lesson07", f"lesson07/jpeg-224-{n}", n, (224, 224), memmaps=((f"lesson07/mm-224-{n}", (224, 224)),))]


def _l08(pick, cuda):
    return [Dataset("lesson08", f"lesson08/jpeg-224-{pick(64, 512)}", pick(64, 512), (224, 224))]


def _l09(pick, cuda):
    n, s = pick(128, 2048), pick(96, 256)
    return [Dataset("lesson09", f"lesson09/jpeg-{s}-{n}", n, (s, s), memmaps=((f"lesson09/mm-{s}-{n}", (s, s)),))]


def _l10(pick, cuda):
    n, (j, m) = pick(64, 1024), pick(((160, 120), (160, 120)), ((640, 480), (320, 240)))
    return [Dataset("lesson10", f"lesson10/jpeg-{j[0]}-{n}", n, j, memmaps=((f"lesson10/mm-{m[0]}-{n}", m),))]


def _l11(pick, cuda):
    w = pick(pipelines.Workload(n=32, jpeg_size=(96, 72), resize=40, crop=16, batch=16),
             pipelines.Workload(n=2048, jpeg_size=(640, 480), resize=256, crop=224, batch=128) if cuda
             else pipelines.Workload(n=128, jpeg_size=(640, 480), resize=192, crop=160, batch=16))
    return [workload_dataset("lesson11", "lesson11", w)]


def _l12(pick, cuda):
    n, s = pick(256, 2048), pick(64, 160)
    return [Dataset("lesson12", f"lesson12/jpeg-{n}", n, (s + 16, s + 16), classes=10,
                    memmaps=((f"lesson12/mm-{n}-{s}", (s, s)),))]


#: The course, in order (DESIGN.md's outline).
LESSONS: tuple[Lesson, ...] = (
    Lesson("00", "00_setup", "Setup and your machine", False, (25, 60), _l00),
    Lesson("01", "01_bottlenecks", "Bottlenecks", True, (20, 60), _l01),
    Lesson("02", "02_profiling", "Profiling and benchmarking", True, (25, 60), _l02),
    Lesson("03", "03_dtypes", "Dtypes and transfer order", True, (30, 120)),
    Lesson("04", "04_jpeg", "JPEG quality and decoding", True, (30, 90), _l04),
    Lesson("05", "05_memmap", "Memory-mapped datasets", True, (30, 90), _l05),
    Lesson("06", "06_batched", "Batched fetching", False, (25, 60)),
    Lesson("07", "07_dataloader", "DataLoader knobs and moving structures", True, (35, 150), _l07),
    Lesson("08", "08_prefetch", "GPU prefetching", True, (30, 55), _l08),
    Lesson("09", "09_augment", "Augmentations: CPU, GPU or both", True, (30, 60), _l09),
    Lesson("10", "10_dali", "NVIDIA DALI", True, (25, 60), _l10),
    Lesson("11", "11_together", "Putting it together", True, (40, 180), _l11),
    Lesson("12", "12_scaling", "Scaling out", True, (30, 90), _l12),
)


def lesson(number: str) -> Lesson:
    """The lesson numbered ``number`` (``"08"``); a KeyError names the numbers there are."""
    for x in LESSONS:
        if x.number == number:
            return x
    raise KeyError(f"no lesson {number!r}: the lessons are {', '.join(x.number for x in LESSONS)}")
