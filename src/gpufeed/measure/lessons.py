"""The course's lessons, listed once: number, notebook, title, the datasets each generates, whether
its GPU figures are committed references, how long it takes on a GPU, and its headline claims with
where their evidence comes from (the evidence box on each lesson page: :mod:`gpufeed.measure.evidence`).

Every reader takes the list from here: ``tools/notebooks.py`` (the "next lesson" footer),
``tools/book.py`` (the site's order), ``make test-gpu`` (``tools/gpurun/``: what it runs and its
time estimates), :mod:`gpufeed.measure.datasets` (what ``gpufeed data prepare`` builds) and the
README's lesson table (``tests/test_lessons.py``). It lives in ``measure/`` so that every room that
needs it may import it (``measure/`` never imports ``course/``; the tools import anything), and it
imports no torch (the tools read titles from it).

Example:
    >>> lesson("08").stem, lesson("08").notebook
    ('08_prefetch', 'notebooks/08_prefetch.ipynb')
    >>> [x.number for x in LESSONS if not x.references]
    ['00', '06']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufeed import config


@dataclass(frozen=True)
class Claim:
    """A headline claim of a lesson, and where the lesson's page gets its evidence.

    Attributes:
        says: the claim, one sentence, as the lesson makes it.
        here: what of it this page measures in the learner's own run ("" where nothing).
        needs_cuda: the page measures ``here`` only where there is CUDA.
        gpu: the claim is about a GPU, so a run without one cannot carry it: the box then names our
            committed GPU reference (:attr:`reference`) where one is committed, what others published,
            or says it is not yet measured on a GPU.
        reference: the stem of the committed result that holds our GPU number for it
            (``results/<gpu>/<reference>.json``); None: the lesson's own (``lessonNN``), where committed.
        published: ids of figures in ``results/published.json`` that measured the same claim.
    """

    says: str
    here: str = ""
    needs_cuda: bool = False
    gpu: bool = False
    reference: str | None = None
    published: tuple[str, ...] = ()


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


#: ``pick(quick_value, full_value, site_value=None)`` for one mode (:func:`gpufeed.config.picker`), and whether the lesson runs on CUDA.
Sizes = Callable[[Callable, bool], list[Dataset]]


@dataclass(frozen=True)
class Lesson:
    """One lesson.

    Attributes:
        number: ``"08"``. stem: the notebook's name, ``"08_prefetch"`` (``notebooks/<stem>.py`` is
            its source, ``.ipynb`` the generated notebook). title: as the outline and the footer say it.
        references: whether a machine without a GPU shows this lesson's committed GPU run
            (``results/<gpu>/lessonNN.json``): then a GPU run keeps its full-mode results.
        gpu_s: stated seconds on one H100 (16 cores), ``(quick mode, full mode)``: what
            ``make test-gpu`` plans with only where no committed GPU run timed the lesson
            (``results/<gpu>/run.json``: the H100's of 2026-11-26 timed most; ``tools/gpurun/plan.py``).
        sizes: the datasets it generates, given ``pick`` and CUDA (see :func:`Lesson.datasets`).
        claims: its one to three headline claims (the evidence box).
    """

    number: str
    stem: str
    title: str
    references: bool
    gpu_s: tuple[float, float]
    sizes: Sizes = lambda pick, cuda: []  # noqa: E731
    claims: tuple[Claim, ...] = ()

    @property
    def owner(self) -> str:
        return f"lesson{self.number}"

    @property
    def source(self) -> str:
        return f"notebooks/{self.stem}.py"

    @property
    def notebook(self) -> str:
        return f"notebooks/{self.stem}.ipynb"

    def datasets(self, mode: str, cuda: bool) -> list[Dataset]:
        """The datasets this lesson generates in ``mode`` (``"quick"``, ``"site"``, ``"full"``), as
        its code asks for them (the same folder names and arguments, so that it finds them built and
        reuses them)."""
        return self.sizes(config.picker(mode), cuda)


def workload_dataset(owner: str, root: str, w) -> Dataset:
    """The dataset :func:`gpufeed.measure.pipelines.prepare` makes for workload ``w`` under ``root``."""
    jpeg, memmap = w.folders()
    return Dataset(owner, f"{root}/{jpeg}", w.n, w.jpeg_size, w.quality, w.classes,
                   memmaps=((f"{root}/{memmap}", (w.resize, w.resize)),))


# Each lesson's datasets, kept in step with its source by hand: tests/test_gpurun.py checks every
# part of every path against the strings and f-strings of the lesson (lesson 11: its workloads).
def _l00(pick, cuda):
    n = pick(16, 256)
    return [Dataset("lesson00", f"lesson00-{w}x{h}-q90-n{n}", n, (w, h)) for w, h in ((224, 224), (640, 480))]


def _l01(pick, cuda):
    n = pick(8, 32, 32) * (pick(2, 8, 4) + 1)  # B x (timed batches + the warm-up one)
    return [Dataset("lesson01", f"lesson01-224x224-q90-n{n}", n, (224, 224))]


def _l02(pick, cuda):
    n = pick(8, 32, 32) * pick(4, 16, 4)
    return [Dataset("lesson02", f"lesson02-224x224-q90-n{n}", n, (224, 224)),
            Dataset("lesson02", "lesson02-640x480-q90-n8", 8, (640, 480))]


def _l04(pick, cuda):
    n, (size, m) = pick(16, 64), pick(((384, 384), 32), ((640, 480), 256), ((384, 384), 64))
    return [*(Dataset("lesson04", f"lesson04-{w}x{h}-q90-n{n}", n, (w, h))
              for w, h in pick([(384, 384)], [(384, 384), (640, 480), (1280, 960)], [(384, 384), (1280, 960)])),
            *(Dataset("lesson04", f"lesson04-{size[0]}x{size[1]}-n{m}-q{q}", m, size, quality=q) for q in (95, 75))]


def _l05(pick, cuda):
    n = pick(128, 5000, 512)
    return [Dataset("lesson05", "lesson05/demo-jpeg", pick(16, 64), (320, 240), classes=4),
            Dataset("lesson05", f"lesson05/jpeg-224-{n}", n, (224, 224),
                    memmaps=((f"lesson05/mm-224-{n}", (224, 224)), (f"lesson05/mm-112-{n}", (112, 112))))]


def _l07(pick, cuda):
    n = pick(64, 2000, 384)
    return [Dataset("lesson07", f"lesson07/jpeg-224-{n}", n, (224, 224), memmaps=((f"lesson07/mm-224-{n}", (224, 224)),))]


def _l08(pick, cuda):
    n = pick(64, 512, 128)
    return [Dataset("lesson08", f"lesson08/jpeg-224-{n}", n, (224, 224))]


def _l09(pick, cuda):
    n, s = pick(128, 2048, 512), pick(96, 256, 128)
    return [Dataset("lesson09", f"lesson09/jpeg-{s}-{n}", n, (s, s), memmaps=((f"lesson09/mm-{s}-{n}", (s, s)),))]


def _l10(pick, cuda):
    n, (j, m) = pick(64, 1024, 256), pick(((160, 120), (160, 120)), ((640, 480), (320, 240)), ((320, 240), (320, 240)))
    return [Dataset("lesson10", f"lesson10/jpeg-{j[0]}-{n}", n, j, memmaps=((f"lesson10/mm-{m[0]}-{n}", m),))]


def _l11(pick, cuda):
    from gpufeed.measure import pipelines  # here, not at the top: reading the list imports no torch

    w = pick(pipelines.Workload(n=32, jpeg_size=(96, 72), resize=40, crop=16, batch=16),
             pipelines.Workload(n=2048, jpeg_size=(640, 480), resize=256, crop=224, batch=128) if cuda
             else pipelines.Workload(n=128, jpeg_size=(640, 480), resize=192, crop=160, batch=16),
             pipelines.Workload(n=128, jpeg_size=(640, 480), resize=64, crop=32, batch=32))
    return [workload_dataset("lesson11", "lesson11", w)]


def _l12(pick, cuda):
    n, s = pick(256, 2048), pick(64, 160)
    return [Dataset("lesson12", f"lesson12/jpeg-{n}", n, (s + 16, s + 16), classes=10,
                    memmaps=((f"lesson12/mm-{n}-{s}", (s, s)),))]


#: Published host-to-device rates, pageable and pinned (NVIDIA's post on data transfers).
_H2D = ("h2d-pageable-gtx680", "h2d-pinned-gtx680", "h2d-pageable-nvs4200m", "h2d-pinned-nvs4200m")

#: The course, in order.
LESSONS: tuple[Lesson, ...] = (
    Lesson("00", "00_setup", "Setup and your machine", False, (25, 60), _l00, claims=(
        Claim("No input pipeline on this machine runs faster than its ceilings: copying RAM (buffers four times "
              "the last-level cache), JPEG decode per core, and file reads with a cold and a warm page cache.",
              here="each ceiling of this machine, and the cache's edge over RAM"),
        Claim("Pinned host memory reaches the GPU faster than pageable memory, and on a current GPU far faster; "
              "pinning each batch first still beats pageable there.",
              here="host-to-device copies from pageable and pinned memory, and pin-then-copy", needs_cuda=True,
              gpu=True, reference="ceilings", published=_H2D),
    )),
    Lesson("01", "01_bottlenecks", "Bottlenecks", True, (20, 60), _l01, claims=(
        Claim("A loop runs at the rate of its slowest stage only when its stages overlap; a naive loop "
              "runs at the sum of them.",
              here="the pipeline simulator's five timelines; a naive loop and one that loads on threads, "
                   "measured in turns, beside the simulator's predictions"),
        Claim("One GPU training ResNet-50 in mixed precision consumes more images per second than a naive "
              "loader on one CPU core delivers.", gpu=True,
              here="how fast the naive loop's loading delivers images on this machine",
              published=("dle-rn50-train-1xa100-amp",)),
    )),
    Lesson("02", "02_profiling", "Profiling and benchmarking", True, (25, 60), _l02, claims=(
        Claim("Timing a lazy iterator, or a first call without a warm-up, measures the wrong thing; "
              "warmed-up samples of two arms taken in turns, read as a ratio with its interval, tell faster, "
              "slower, the same, or that the run cannot tell.",
              here="each mistake and its fix on this machine, and the verdicts of section 8"),
        Claim("Without a CUDA synchronize a timer reads how long the GPU's work took to queue, not to run.",
              here="the same step timed with and without a sync", needs_cuda=True, gpu=True),
    )),
    Lesson("03", "03_dtypes", "Dtypes and transfer order", True, (30, 120), claims=(
        Claim("A uint8 batch puts 4x fewer bytes on the wire than float32, 2x fewer than float16.",
              here="the bytes of each batch"),
        Claim("Sending uint8 and converting on the GPU beats converting on the host first, the more so the "
              "larger the image.", here="the host's side only: converting a batch on the host against a plain "
              "copy of it, timed in turns", gpu=True),
    )),
    Lesson("04", "04_jpeg", "JPEG quality and decoding", True, (30, 90), _l04, claims=(
        Claim("Lower JPEG quality saves most of the bytes at a small error (PSNR, SSIM), and decodes faster.",
              here="file size and error at each quality, and the decodes timed in turns"),
        Claim("Pillow and torchvision decode with the same libjpeg-turbo: a gap between them lies in the copies "
              "around the decoder; decoding straight to a smaller size (draft()) saves more.",
              here="the library each one loaded, each step of a decode and draft(), timed in turns"),
        Claim("A GPU's batched JPEG decoder decodes many times more images per second than one CPU core.",
              here="batched decoding on the GPU", needs_cuda=True, gpu=True,
              published=("decode-cuda-batched-tv-a100", "decode-cuda-unfused-tv-a100", "decode-cpu-unfused-tv-a100-host")),
    )),
    Lesson("05", "05_memmap", "Memory-mapped datasets", True, (30, 90), _l05, claims=(
        Claim("A memmap of decoded uint8 images feeds batches many times faster than a folder of JPEGs.",
              here="the JPEG folder against the memmap, taken in turns, with a warm and with a cold page cache"),
        Claim("On a many-core GPU server (FFCV's figures), raw pixels from RAM loaded several times more images/s than "
              "JPEGs, though at half the JPEGs' resolution; from network storage, at one resolution, the JPEGs won.", gpu=True,
              published=("ffcv-load-ram-raw-256", "ffcv-load-ram-jpeg-512", "ffcv-load-ebs-raw-512",
                         "ffcv-load-ebs-jpeg-512")),
    )),
    Lesson("06", "06_batched", "Batched fetching", False, (25, 60), claims=(
        Claim("One call per batch costs far less than one Python call per sample.",
              here="per-sample __getitem__ against __getitems__, a BatchSampler and FastLoader, taken in turns"),
        Claim("Past a few million indices, a grouped shuffle costs less than a full one (torch.randperm); near a "
              "million it costs about as much, and below that more.",
              here="both shuffles taken in turns at each size, up to 10^7 indices (10^8 in full mode)"),
        Claim("A grouped shuffle reads a dataset larger than the memory with far fewer bytes than a full shuffle "
              "over a plain mapping, whose read-ahead fetches pages that are evicted before they are used.",
              here="the bytes read from a file four times the memory allowed, in both orders (a deep dive)"),
    )),
    Lesson("07", "07_dataloader", "DataLoader knobs and moving structures", True, (35, 150), _l07, claims=(
        Claim("Workers pay for decoding JPEGs, up to the cores; a memmap read a batch at a time needs none.",
              here="the num_workers sweep of a JPEG folder and a memmap, every configuration taken in turns"),
        Claim("A copy from pinned host memory reaches the GPU faster than one from pageable memory.",
              here="the copy of one batch from pinned and from pageable memory", needs_cuda=True, gpu=True,
              reference="ceilings", published=_H2D),
        Claim("non_blocking=True returns before the copy ends only from pinned memory, and a GPU-to-CPU copy "
              "read before a sync gives wrong values.", here="when each copy returns, and the unsafe read",
              needs_cuda=True, gpu=True),
    )),
    Lesson("08", "08_prefetch", "GPU prefetching", True, (30, 55), _l08, claims=(
        Claim("Each line of a side-stream prefetcher (wait_stream, record_stream, the event) is needed: "
              "without one, a batch is read before its copy, freed while in use, or copied from a pinned "
              "buffer already refilled.", here="each hazard on the CUDA-ordering simulator, in four orders"),
        Claim("A thread prefetcher overlaps loading with the step when the step leaves it the GIL, as a "
              "GPU step's waiting host side does: up to the bound, first batch included.",
              here="a real and a waiting step, with and without the thread, epochs in turns"),
        Claim("A GPU prefetcher's host work (asking the loader, which gathers and pins; issuing the copy) "
              "idles a GPU that syncs every step when done in your loop; on its own thread it can hide behind "
              "the step.",
              here="the three loader-fed arms in turns, with a step that syncs and one that does not",
              needs_cuda=True, gpu=True),
    )),
    Lesson("09", "09_augment", "Augmentations: CPU, GPU or both", True, (30, 60), _l09, claims=(
        Claim("A random transform applied to a batch draws one set of parameters for all of it; a few "
              "batched calls give per-sample randomness.", here="the trap and the fix, image by image"),
        Claim("Batched uint8 augmentation on the GPU beats per-sample torchvision in CPU workers.",
              here="both pipelines in turns, the batched one on the GPU", needs_cuda=True, gpu=True),
        Claim("torch.compile fuses the pointwise tail (to float, jitter, normalise) into far fewer operators "
              "or kernels, and runs it faster; what that saves of a whole batch depends on the tail's share of it.",
              here="the eager and compiled tails in turns (quick mode on a CPU skips the compile), the profiler's "
                   "counts, and the tail's share of a batch"),
    )),
    Lesson("10", "10_dali", "NVIDIA DALI", True, (25, 60), _l10, claims=(
        Claim("On the same CPU cores, DALI's C++ pipeline is to be weighed against a tuned DataLoader, not only "
              "the untuned one: the tuning (a decoder without Pillow, uint8 through the workers) closes much of the gap.",
              here="DALI (CPU-only) and the untuned and tuned DataLoaders, in turns on the same cores"),
        Claim("On a GPU, nvJPEG, the library DALI's \"mixed\" decoder uses, decodes many times more images per "
              "second than one CPU thread.", here="DALI with the GPU decoder", needs_cuda=True, gpu=True,
              published=("decode-cuda-batched-tv-a100", "decode-cpu-unfused-tv-a100-host")),
        Claim("With several ranks, pad_last_batch and the iterator's last-batch policy decide whether every rank "
              "runs the same steps, reads each file once, or trains on padding.",
              here="what each setting made two shards read, over two epochs for DROP"),
    )),
    Lesson("11", "11_together", "Putting it together", True, (40, 180), _l11, claims=(
        Claim("The course's loop trains faster than the naive loop on the same model and data.",
              here="the two loops in turns on a ResNet-18"),
        Claim("Loader efficiency says whether the model waits for data: a loop that makes each batch and then "
              "trains on it cannot beat 1 / (1 + model rate / loader rate); a prefetch thread lets it.",
              here="each pipeline's efficiency against that bound, and the naive loop with and without a prefetch "
                   "thread, in turns"),
        Claim("On a GPU the model trains thousands of images/s, so the loader must make as many: where it "
              "cannot, the loader decides the rate.", gpu=True,
              published=("dle-rn50-train-1xa100-amp", "dle-rn50-train-1xv100-amp")),
    )),
    Lesson("12", "12_scaling", "Scaling out", True, (30, 90), _l12, claims=(
        Claim("Ranks on one machine share one page cache: the dataset is read from disk once and held in RAM once, "
              "which their PSS shows and their RSS, added up, does not.",
              here="the major faults of a cold and a warm reader and of two ranks after a drop; eight readers' RSS "
                   "and PSS"),
        Claim("Data-parallel training multiplies throughput by the GPUs while each rank's loader keeps up.",
              here="1 and 2 processes with gloo on this CPU, runs in turns", gpu=True,
              published=("dle-rn50-train-8xa100-amp", "dle-rn50-train-1xa100-amp")),
        Claim("Each rank needs its own augmentation seed: seeded alike, every rank draws the same crops.",
              here="the crops two ranks draw, seeded alike and by (seed, epoch, rank)"),
    )),
)


def lesson(number: str) -> Lesson:
    """The lesson numbered ``number`` (``"08"``); a KeyError names the numbers there are."""
    for x in LESSONS:
        if x.number == number:
            return x
    raise KeyError(f"no lesson {number!r}: the lessons are {', '.join(x.number for x in LESSONS)}")
