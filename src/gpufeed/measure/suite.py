"""``python -m gpufeed bench``: every pipeline of :mod:`gpufeed.measure.pipelines`, side by side, in one run.

For each pipeline two numbers, in images/s: the loader alone (batches made and left on the device),
and the loader feeding a training step of a torchvision ResNet with random weights: ResNet-18, or
ResNet-50 at the full GPU size, where the course's loader-efficiency bar is set. The course's
``uint8``-out variant, whose batches are bytes rather than a model's input, gets only the first. Beside them
the ceilings: ``memcpy`` of the same bytes (a uint8 batch), the host-to-device copy of those bytes
where CUDA exists, and the training step on batches already on the device (``resident``); and two
honest bounds for the loader alone, each pipeline reported as a fraction of both: ``memcpy_stream``,
the memmap's distinct images copied in file order into a ring of two buffers, and ``batch_fetch``,
the course's raw shuffled gather (FastLoader alone) into the same ring; the summary prints the fetch
as a fraction of the stream, and the course's pipelines against their bandwidth bound (the bytes
each must read and write per image at the stream's rate,
:func:`gpufeed.measure.rates.bandwidth_bound`). Each loader's peak memory (PSS of the process and
its workers, :mod:`gpufeed.measure.memory`) and the cores it kept busy (:mod:`gpufeed.measure.cpu`)
sit beside its speed. ``--peers`` adds FFCV, SPDL and torchdata.nodes where installed
(:mod:`gpufeed.measure.peers`), each in its own process.
*Loader efficiency* (lesson 11) is a pipeline's training throughput over the resident one.

All numbers come from one process, one dataset and the same cores (a warm-up pass first, CUDA
synchronised before every clock read, median and IQR of several passes; loaders one after the
other, then the two bounds and the peers, then training passes in turns): ratios between them are
what to quote. ``run`` writes ``results.json`` and two plots (:mod:`gpufeed.measure.bench_report`
reads a run for people: the Markdown table, the bounds in words, the plots),
and ``results.partial.json`` as each pipeline finishes (what a run cut short keeps; removed at the end).

A pass is a whole epoch, or, under a time cap per case (``GPUFEED_MEASURE_S``,
:func:`gpufeed.config.measure_cap`; ``make test-gpu`` sets it), as many batches as fit the
cap, sized from two probe batches (``passes`` in the results says how many; the naive loader at
the GPU size takes half a minute an epoch). DALI's passes end once its threads are idle
(:func:`ending_idle`): it goes on making the next batches after the last one a pass takes, work
that would otherwise run while the next case is timed.

Example:
    >>> rows = records_from({"naive": 2.0, "course": 0.1}, {"naive": 4.0, "course": 3.0, "resident": 2.9},
    ...                     images={"loader": 10, "train": 10}, loader_ceiling=1000.0)
    >>> [(r["pipeline"], r["mode"], r["ratio_to_naive"]) for r in rows]
    [('naive', 'loader', 1.0), ('course', 'loader', 20.0), ('naive', 'train', 1.0), ('course', 'train', 1.33), ('resident', 'train', 1.38)]
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from gpufeed.measure import bench_report, pipelines, progress
from gpufeed.measure import harness as bench
from gpufeed.measure.pipelines import Workload

FILE = "results.json"
FORMAT = "gpufeed-pipeline-bench"
#: What a run has measured so far, saved as each pipeline finishes (a :func:`harness.save` file).
PARTIAL = "results.partial.json"


def consume(batches: Iterable, limit: int) -> int:
    """Takes up to ``limit`` batches; returns the number of images seen (the last value is kept
    alive until here, so lazily computed GPU results are part of the timed work after the sync)."""
    seen, last = 0, None
    for images, _ in itertools.islice(batches, limit):
        seen, last = seen + images.shape[0], images
    del last
    return seen


def make_model(w: Workload, device) -> tuple[torch.nn.Module, Callable]:
    """The workload's torchvision model (``w.model``, random weights) and its training step ``step(images, targets)``.

    On CUDA: channels-last and bfloat16 autocast (what a tuned training loop uses); on the CPU:
    float32. SGD with momentum; the step returns nothing, so no ``.item()`` forces a sync.
    """
    import torchvision

    device = torch.device(device)
    torch.manual_seed(0)
    model = getattr(torchvision.models, w.model)(weights=None, num_classes=w.classes).to(device)
    cuda = device.type == "cuda"
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images: torch.Tensor, targets: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = loss_fn(model(images), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return model, step


def train(batches: Iterable, step: Callable, limit: int) -> int:
    """Runs ``step`` on up to ``limit`` batches; returns the number of images trained on."""
    seen = 0
    for images, targets in itertools.islice(batches, limit):
        step(images, targets)
        seen += images.shape[0]
    return seen


#: Bytes a value of the course's pipelines' output, by name in :func:`sources`: what each must write
#: per pixel, for its bandwidth bound (:func:`gpufeed.measure.rates.pipeline_bytes`).
OUT_ITEMSIZE = {"course": torch.float32.itemsize, "course_uint8": torch.uint8.itemsize}


def sources(data: pipelines.Data, w: Workload, device, *, workers: int, dali: bool) -> dict[str, Callable]:
    """``name -> epoch()``: each call starts a new pass and returns an iterator of device batches."""
    tuned_loader = pipelines.tuned_loader(data, w, device, workers)
    course = pipelines.Course(data, w, device)
    raw = pipelines.Course(data, w, device, dtype=torch.uint8)  # pipelines.LOADER_ONLY: bytes, not model input
    out = {"naive": lambda: pipelines.naive(data, w, device),
           "tuned": lambda: pipelines.tuned(tuned_loader, device),
           "course": lambda: iter(course),
           "course_uint8": lambda: iter(raw)}
    if dali:
        out["dali"] = dali_source(data, w, device, workers)
    resident = pipelines.resident(w, device)
    out["resident"] = lambda: iter(resident)
    return out


def dali_source(data: pipelines.Data, w: Workload, device, threads: int) -> Callable:
    """DALI's ``epoch()``. The pipeline is built at the first call, not before: its C++ threads
    must not exist yet when a DataLoader forks its workers (a fork copies a lock that another
    thread holds as held, forever).

    An epoch ends only once DALI's threads are idle (:func:`wait_idle`; on CUDA, the device
    synchronised too): each batch taken schedules the pipeline's next run, so when the last batch
    of an epoch is handed over DALI goes on making the next epoch's first batches (about 0.1 to 0.2
    CPU seconds at lesson 11's site size), which would otherwise run while the case timed after it
    is measured. A pass that runs an epoch to its end pays for that work itself; a pass that stops
    before the end (``itertools.islice``) leaves it running."""
    from gpufeed.measure import dali as gdali

    made = []
    cuda = torch.device(device).type == "cuda"

    def epoch():  # with auto_reset, the iterator rewinds itself after each full epoch
        if not made:
            from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

            pipe = gdali.train_pipeline(data.jpeg, w.resize, w.crop, batch_size=w.batch, num_threads=threads,
                                        device_id=gdali.device_id())
            made.append(DALIGenericIterator(pipe, ["images", "labels"], reader_name="reader",
                                            last_batch_policy=LastBatchPolicy.DROP, auto_reset=True))
        for batch in made[0]:
            images, labels = gdali.unpack(batch)
            yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        wait_idle()  # the epoch has ended: DALI's work ahead is this pass's, not the next case's
        if cuda:
            torch.cuda.synchronize()

    return epoch


def ending_idle(name: str, run: Callable[[], int]) -> Callable[[], int]:
    """``run`` (a timed pass of pipeline ``name``, returning images) ending only once this process's
    threads are idle (:func:`wait_idle`) where the pipeline works ahead on them after the last batch
    a pass takes (DALI); the others' ``run`` itself. A pass of an endless stream stops at a batch,
    not at an epoch's end, so :func:`dali_source`'s own drain does not run there: without this, DALI's
    next batches (0.18 to 0.23 CPU s at lesson 11's site size) were made while the next case was timed.

    Example:
        >>> ending_idle("course", len) is len
        True
    """
    if name != "dali":
        return run

    def ended() -> int:
        seen = run()
        wait_idle()
        return seen

    return ended


def wait_idle(most_s: float = 2.0, window_s: float = 0.01, share: float = 0.3) -> float:
    """Waits until the threads of this process use less than ``share`` of a core over ``window_s``
    seconds (``time.process_time``: a cheap read, so the wait does not measure itself), at most
    ``most_s``; returns the seconds it waited (at least one window). Threads only: DALI's work
    ahead runs on threads of this process; DataLoader workers do not work ahead once their epoch
    has ended.

    Example:
        >>> 0.01 <= wait_idle() < 2.0  # nothing runs here
        True
    """
    start = time.perf_counter()
    while time.perf_counter() - start < most_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < share * window_s:
            break
    return time.perf_counter() - start


def memmap_build_seconds(data: pipelines.Data, w: Workload, workers: int = 1) -> float:
    """Seconds to build the course's memmap from the JPEGs: the one-off price of decoding once,
    measured in this run (into a temporary folder, deleted after) when ``prepare`` reused one."""
    import tempfile

    from gpufeed.data.memmap import build_memmap

    with tempfile.TemporaryDirectory(dir=data.memmap.parent, prefix=".build-time-") as tmp:
        return build_memmap(data.jpeg, Path(tmp) / "mm", size=(w.resize, w.resize), workers=workers,
                            progress=False).seconds


def forever(epoch: Callable[[], Iterable]):
    """One endless stream of batches: epoch after epoch of ``epoch()``, so that a pass can stop
    anywhere (a few training steps) and the next one goes on where it stopped, as training does."""
    while True:
        yield from epoch()


def records_from(loader_s: dict[str, float], train_s: dict[str, float], *, images: dict[str, int | dict[str, int]],
                 loader_ceiling: float) -> list[dict]:
    """One record per pipeline and mode from median seconds per pass: images/s, the ratio to
    naive, and the fraction of the relevant ceiling (``loader_ceiling`` images/s for the loader
    alone, the resident training throughput for training). ``images[mode]``: images per pass, one
    number for every pipeline or ``{pipeline: number}``."""
    rows = []
    for mode, times in (("loader", loader_s), ("train", train_s)):
        per = images[mode]
        n = (lambda name, per=per: per) if isinstance(per, int) else (lambda name, per=per: per[name])  # noqa: E731
        base = n("naive") / times["naive"] if "naive" in times else None
        ceiling = loader_ceiling if mode == "loader" else (
            n("resident") / times["resident"] if "resident" in times else 0.0)
        for name, s in times.items():
            rate = n(name) / s
            rows.append({"pipeline": name, "mode": mode, "images_per_s": round(rate, 1),
                         "ratio_to_naive": round(rate / base, 2) if base else None,
                         "fraction_of_ceiling": float(f"{rate / ceiling:.3g}") if ceiling else None})
    return rows


def run(out: str | Path, *, quick: bool, device, workload: Workload | None = None, repeats: int | None = None,
        dali: bool | None = None, threads: int | None = None, peers: bool = False,
        log: Callable[[str], None] = print) -> Path:
    """Measures every pipeline (loader alone, then with a training step) and writes ``out/results.json``.

    Args:
        out: the folder for ``results.json`` and the plots.
        quick: the 2-core CI sizes (:data:`gpufeed.measure.pipelines.QUICK`) unless ``workload`` is given.
        device: where batches end up and the model runs.
        repeats: timed passes per case (default 5).
        dali: include DALI (default: where it is installed).
        peers: add the other loaders :mod:`gpufeed.measure.peers` finds installed (loader alone only).
        threads: torch's intra-op threads in this process while measuring (default: 1 on the CPU,
            torch's own choice on CUDA). Every pipeline brings its own parallelism (workers, DALI's
            threads, the prefetch thread); torch's threads on top of those outnumber the cores, and
            then each parallel op waits for a descheduled thread: measured here, 2 threads made the
            naive loop 6x slower on a busy 2-core machine.
    """
    device = torch.device(device)
    threads = threads or (1 if device.type == "cpu" else torch.get_num_threads())
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(Path(out), quick, device, workload, repeats, dali, threads, peers, log)
    finally:
        torch.set_num_threads(before)


def _run(out: Path, quick: bool, device: torch.device, workload: Workload | None, repeats: int | None,
         dali: bool | None, threads: int, peers: bool, log: Callable[[str], None]) -> Path:
    from gpufeed import config
    from gpufeed.measure import dali as gdali
    from gpufeed.measure import rates
    from gpufeed.measure.cpu import CoresBusy
    from gpufeed.measure.machine import usable_cores
    from gpufeed.measure.memory import PeakPss

    log = progress.around(log)  # lines above the bars, not inside them
    w = workload or pipelines.workload(quick, device)
    repeats = repeats or 5
    dali = gdali.available() if dali is None else dali
    workers = usable_cores()
    data = pipelines.prepare(w, config.cache_dir() / "bench", workers=1 if quick else workers)
    build_s = data.memmap_s or memmap_build_seconds(data, w, workers=1 if quick else workers)
    log(f"dataset: {w.n} JPEGs {w.jpeg_size[0]}x{w.jpeg_size[1]} q{w.quality}, memmap {w.resize}x{w.resize} "
        f"(built in {build_s:.1f} s); batches of {w.batch} at {w.crop}x{w.crop} on {device}")
    streams = {name: forever(epoch) for name, epoch in sources(data, w, device, workers=workers, dali=dali).items()}
    per_epoch = w.n // w.batch
    steps = per_epoch if device.type == "cuda" else 2  # on a CPU one step takes seconds: two say enough
    cap = bench.measure_cap()
    passes: dict[str, int] = {}  # batches per loader pass, by pipeline; steps per training pass: "train"
    images: dict = {"loader": {}, "train": steps * w.batch}
    # Loader alone: one pipeline at a time, whole epochs back to back after a warm-up epoch. Timed
    # in turns instead, a pipeline that reads ahead across epochs (DALI refills its queue as soon
    # as an epoch ends) would get part of its next epoch made for free while another is timed.
    # With the model: in turns (a, b, c, a, b, c...), so that a slow spell of a shared machine hits
    # every pipeline alike; here any read-ahead is a few batches against seconds of training, and
    # the passes go on along each pipeline's endless stream, as training does.
    ms: list[bench.Measurement] = []
    peak: dict[str, int | None] = {}  # bytes: PSS of this process and its workers while a pipeline ran
    busy: dict[str, float | None] = {}  # cores this process and its workers kept busy, warm-up included
    def keep() -> None:  # what is measured so far, for a run cut short (a time limit, Ctrl-C)
        bench.save(out / PARTIAL, ms, kind=f"{FORMAT}-partial", quick=quick, device=str(device),
                   workload=w.to_dict(), passes=passes, measure_s=cap)

    try:
        for name, s in progress.bar([(n, s) for n, s in streams.items() if n != "resident"], unit="pipeline",
                                    desc=f"bench: each loader alone, {repeats + 1} passes"):
            k = per_epoch if cap is None else fitting(lambda b, s=s: consume(s, b), per_epoch, cap, repeats)
            passes[name] = k
            images["loader"][name] = k * w.batch
            with PeakPss() as p, CoresBusy() as c:
                ms.append(bench.benchmark(ending_idle(name, lambda s=s, k=k: consume(s, k)), name=f"{name} loader", warmup=1,
                                          repeats=repeats, items=k * w.batch,
                                          params={"pipeline": name, "mode": "loader", "pass_batches": k}))
            peak[name], busy[name] = p.peak, c.cores
            log(f"  {ms[-1]}")
            keep()
        # The loader-alone side ends with the bounds and the peers, before any training: the ratios
        # the bench quotes (fetch of stream, course of FFCV) come from minutes apart, not from
        # either side of a long training phase.
        bounds = _loader_bounds(data, w, repeats)  # memcpy_stream, batch_fetch: images/s
        for m in bounds:
            log(f"  {m}")
        stream = bounds[0]
        # the course's pipelines against the bytes they must move per image at the stream's rate
        moved = {name: rates.pipeline_bytes(w.crop, size) for name, size in OUT_ITEMSIZE.items()}
        bandwidth = {name: rates.bandwidth_bound(stream, n) for name, n in moved.items()}
        peer_ms: list[bench.Measurement] = []
        if peers:
            from gpufeed.measure import peers as gpeers

            peer_ms = gpeers.measure_all(data, w, threads=workers, repeats=repeats, log=log)
            for m in peer_ms:
                peak[m.params["pipeline"]] = m.params.pop("peak_pss")
                busy[m.params["pipeline"]] = m.params.pop("cores_busy")
                images["loader"][m.params["pipeline"]] = m.items  # a peer's pass: whole epochs of its own
        _, step = make_model(w, device)
        trainable = {n: s for n, s in streams.items() if n not in pipelines.LOADER_ONLY}
        if cap is not None:  # every pipeline takes the same steps per pass, sized by the slowest
            steps = min(fitting(lambda b, s=s: train(s, step, b), steps, cap, repeats) for s in trainable.values())
            images["train"] = steps * w.batch
        passes["train"] = steps
        trained = bench.interleave({n: ending_idle(n, lambda s=s: train(s, step, steps)) for n, s in trainable.items()},
                                   repeats=repeats, items=images["train"],
                                   params={n: {"pipeline": n, "mode": "train", "pass_batches": steps}
                                           for n in trainable},
                                   desc=f"bench: {steps} training steps per pass, in turns")
        for m in trained:
            m.name = f"{m.params['pipeline']} train"
            log(f"  {m}")
        ms += trained
        keep()
    finally:
        for s in streams.values():
            s.close()  # ends DataLoader workers and prefetch threads now, not at garbage collection
    ceilings_ms = _ceilings(w, device)
    per_image = 3 * w.crop * w.crop  # bytes of one uint8 image on the wire
    wire = ceilings_ms[-1]  # H2D pinned on CUDA, memcpy on the CPU
    loader_ceiling = wire.gb_per_s * 1e9 / per_image
    medians = {mode: {m.params["pipeline"]: m.median for m in ms if m.params["mode"] == mode}
               for mode in ("loader", "train")}
    medians["loader"].update({m.params["pipeline"]: m.median for m in peer_ms})
    rows = records_from(medians["loader"], medians["train"], images=images, loader_ceiling=loader_ceiling)
    by_case = {(m.params["pipeline"], m.params["mode"]): m for m in ms + peer_ms}
    bound_rates = {m.params["ceiling"]: m.items_per_s for m in bounds}
    for row in rows:
        m = by_case[row["pipeline"], row["mode"]]
        q1, _, q3 = m.rate_quartiles()
        row.update(median_s=m.median, iqr_s=m.iqr, images_per_s_iqr=[round(q1, 1), round(q3, 1)], noisy=m.noisy)
        if row["mode"] == "loader":
            row.update({f"fraction_of_{k}": float(f"{row['images_per_s'] / v:.3g}") for k, v in bound_rates.items()})
            row["peak_pss_mb"] = None if peak.get(row["pipeline"]) is None else round(peak[row["pipeline"]] / 2**20, 1)
            row["cores_busy"] = None if busy.get(row["pipeline"]) is None else round(busy[row["pipeline"]], 2)
            if row["pipeline"] in bandwidth:
                row["fraction_of_bandwidth_bound"] = float(f"{row['images_per_s'] / bandwidth[row['pipeline']]:.3g}")
    path = bench.save(out / FILE, ms + peer_ms + bounds + ceilings_ms, kind=FORMAT, quick=quick, device=str(device),
                      workload=w.to_dict(), workers=workers, threads=threads, records=rows,
                      ceilings={"loader_images_per_s": round(loader_ceiling, 1), "wire": wire.name,
                                "bytes_per_image": per_image,
                                **{f"{k}_images_per_s": round(v, 1) for k, v in bound_rates.items()},
                                "fetch_of_stream": float(f"{rates.fetch_fraction(*bounds):.3g}"),
                                "stream_gb_per_s": round(rates.stream_bytes_per_s(stream) / 1e9, 2),  # read + written
                                "bandwidth_bound": {name: {"bytes_per_image": moved[name],
                                                           "images_per_s": round(bandwidth[name], 1)}
                                                    for name in moved}},
                      peers=sorted(m.params["pipeline"] for m in peer_ms),
                      memmap_build_s=round(build_s, 3), passes=passes, measure_s=cap,
                      dali=gdali.version() if dali else None, torch=torch.__version__)
    (out / PARTIAL).unlink(missing_ok=True)
    bench_report.plot(load(path), path.parent)
    return path


def fitting(run: Callable[[int], object], most: int, cap: float, repeats: int) -> int:
    """Batches per pass so that a warm-up and ``repeats`` passes of ``run(batches)`` take about
    ``cap`` seconds: ``run(1)`` once to start (workers, caches), once timed; between 1 and ``most``.

    Example:
        >>> import time
        >>> k = fitting(lambda b: time.sleep(0.01 * b), most=1000, cap=0.6, repeats=5)  # ~0.1 s a pass
        >>> 5 <= k <= 10, fitting(lambda b: time.sleep(0.01 * b), most=3, cap=0.6, repeats=5)
        (True, 3)
    """
    run(1)
    bench.cuda_sync()
    start = time.perf_counter()
    run(1)
    bench.cuda_sync()
    per_batch = time.perf_counter() - start
    return max(1, min(most, int(cap / (repeats + 1) / max(per_batch, 1e-9))))


def _loader_bounds(data: pipelines.Data, w: Workload, repeats: int) -> list[bench.Measurement]:
    """The loader's two honest bounds on the memmap's images: a streaming copy, and the raw gather.

    Both with torch's threads on every usable core: a bound is what the whole machine can do (the
    pipelines, which bring threads of their own, are timed with torch's at ``threads``).
    """
    from gpufeed.data.memmap import load_memmap
    from gpufeed.measure import ceilings
    from gpufeed.measure.machine import usable_cores

    images = load_memmap(data.memmap).images
    before = torch.get_num_threads()
    torch.set_num_threads(usable_cores())
    try:
        return ceilings.loader_bounds(images, w.batch, repeats=repeats)  # in turns, long samples
    finally:
        torch.set_num_threads(before)


def _ceilings(w: Workload, device) -> list[bench.Measurement]:
    """memcpy of one uint8 batch, and on CUDA its host-to-device copy from pinned memory (last)."""
    from gpufeed.measure import ceilings

    nbytes = w.batch * 3 * w.crop * w.crop
    ms = [ceilings.memcpy(nbytes)]
    if torch.device(device).type == "cuda":
        ms.append(ceilings.host_to_device(nbytes, pinned=True))
    return ms


def load(path: str | Path) -> dict:
    """The document :func:`run` wrote (``records``, ``workload``, ``machine``...)."""
    _, doc = bench.load(Path(path) / FILE if Path(path).is_dir() else path)
    if doc.get("kind") != FORMAT:
        raise ValueError(f"{path} is not a `gpufeed bench` results file")
    return doc


def summary(doc: dict) -> str:
    """The records as a text table, one line per pipeline and mode."""
    lines = [f"{'pipeline':14} {'mode':7} {'images/s':>10} {'vs naive':>9} {'of ceiling':>10} "
             f"{'of stream':>9} {'of fetch':>8} {'peak MB':>8} {'cores':>6}"]
    pct = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
    for r in doc["records"]:
        ratio = "-" if r["ratio_to_naive"] is None else f"{r['ratio_to_naive']:.2f}x"
        mb = "-" if r.get("peak_pss_mb") is None else f"{r['peak_pss_mb']:,.0f}"
        cores = "-" if r.get("cores_busy") is None else f"{r['cores_busy']:.2f}"
        noisy = "  [noisy]" if r.get("noisy") else ""
        lines.append(f"{r['pipeline']:14} {r['mode']:7} {r['images_per_s']:>10,.1f} {ratio:>9} "
                     f"{pct(r['fraction_of_ceiling']):>10} {pct(r.get('fraction_of_memcpy_stream')):>9} "
                     f"{pct(r.get('fraction_of_batch_fetch')):>8} {mb:>8} {cores:>6}{noisy}")
    c = doc["ceilings"]
    if "memcpy_stream_images_per_s" in c:
        lines.append(f"ceilings: memcpy stream {c['memcpy_stream_images_per_s']:,.0f} images/s, "
                     f"raw batch fetch {c['batch_fetch_images_per_s']:,.0f} images/s")
    return "\n".join(lines + bench_report.bound_lines(doc))
