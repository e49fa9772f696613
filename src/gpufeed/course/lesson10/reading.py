"""Sentences that read lesson 10's measurements, whichever way they point.

Every comparison is a verdict of the one method (:mod:`gpufeed.measure.verdict`) on arms timed in
turns; a cause is stated only where the page measured it, otherwise as "one likely cause, not
measured here" (:data:`~gpufeed.measure.verdict.LIKELY_START`), and a run that cannot tell says what
would (:func:`~gpufeed.measure.verdict.advice`).

* :func:`throughput` (section 7): the untuned and the tuned DataLoader, DALI on the JPEG folder and
  on the memmap, all on the same cores;
* :func:`scaling` (exercise 2): 1 worker or thread against all cores, and whose gain is larger;
  its comparison at all cores reads section 7's (:meth:`~gpufeed.measure.verdict.Verdict.reads`);
* :func:`decode_ceiling` (exercise 3): the pipeline against a pipeline that only reads and decodes;
* :func:`shard_findings` and :func:`shard_reading` (section 8): what each ``pad_last_batch`` and
  ``LastBatchPolicy`` did to two ranks' epochs, and which to use;
* :func:`published_reading` (section 9): others' GPU decode figures, what is theirs and what is ours.

Taught in ``notebooks/10_dali.ipynb``.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> slow = Measurement("untuned", [1.00, 1.02, 0.99, 1.01, 1.00], items=64)
    >>> fast = Measurement("tuned", [0.50, 0.50, 0.51, 0.49, 0.50], items=64)
    >>> print(throughput(slow, fast, slow, cores=2, cuda=False))  # doctest: +ELLIPSIS
    The untuned DataLoader made 64 images/s from the JPEG folder and 64 from the memmap: ... the tuned one made 128 from the JPEG folder: **2.00x faster** than the untuned one (1.94x to 2.04x). One likely cause, not measured here: ...
"""

from __future__ import annotations

from gpufeed.course.lesson09.reading import across_cells, rate
from gpufeed.measure import verdict
from gpufeed.measure.verdict import FASTER, LIKELY_START, SAME, SLOWER, Verdict, advice, compare
from gpufeed.measure.wording import sentences

#: Section 7's questions, as :func:`advice` words them.
MEMMAP, TUNED, DALI_TUNED, DALI_UNTUNED, DALI_MEMMAP = (
    "the memmap from the JPEG folder", "the tuned DataLoader from the untuned one", "DALI from the tuned DataLoader",
    "DALI from the untuned DataLoader", "DALI from the DataLoader on the memmap")


def throughput_verdicts(jpeg, tuned, memmap, dali=None, dali_memmap=None) -> dict[str, Verdict]:
    """Section 7's questions, keyed as :func:`advice` words them; the DALI ones only where DALI ran."""
    out = {MEMMAP: compare(memmap, jpeg, paired=True), TUNED: compare(tuned, jpeg, paired=True)}
    if dali is not None:
        out |= {DALI_TUNED: compare(dali, tuned, paired=True), DALI_UNTUNED: compare(dali, jpeg, paired=True)}
    if dali_memmap is not None:
        out[DALI_MEMMAP] = compare(dali_memmap, memmap, paired=True)
    return out


def throughput(jpeg, tuned, memmap, dali=None, dali_memmap=None, *, cores: int, cuda: bool,
               smaller_memmap: bool = False) -> str:
    """Section 7's reading: every arm timed in turns, one epoch each, on ``cores`` workers or threads.

    Args:
        jpeg, tuned, memmap: Measurements of the untuned DataLoader on the JPEG folder, the tuned one
            on the JPEG folder, and the untuned one on the memmap.
        dali, dali_memmap: DALI on the JPEG folder and through ``external_source`` on the memmap, or
            None where DALI is not installed.
        cuda: DALI decoded and augmented on the GPU.
        smaller_memmap: the memmap stores smaller images than the JPEGs (full mode), another
            difference between those two rows.
    """
    v = throughput_verdicts(jpeg, tuned, memmap, dali, dali_memmap)
    text = (f"The untuned DataLoader made {rate(jpeg)} images/s from the JPEG folder and {rate(memmap)} from the "
            f"memmap: {v[MEMMAP].words('the folder')}.")
    if v[MEMMAP].kind == FASTER:
        text = sentences(text, f"{LIKELY_START} decoding, which the memmap skips; the rows also differ in what the "
                           "transforms take (Pillow images against tensors)"
                     + (", and the memmap stores smaller images." if smaller_memmap else "."))
    elif v[MEMMAP].kind == SLOWER:
        text = sentences(text, f"{LIKELY_START} the memmap's transforms run on tensors, not on Pillow images, and here "
                           "that cost more than decoding these small JPEGs.")
    text = sentences(text, f"With lessons 03-07's fixes the tuned one made {rate(tuned)} from the JPEG folder: "
                       f"{v[TUNED].words('the untuned one', bold=True)}.")
    if v[TUNED].kind == FASTER:
        text = sentences(text, f"{LIKELY_START} its decoder without Pillow, its crop on uint8 and a quarter of the bytes "
                           "handed over; this page does not time each fix apart.")
    if dali is not None:
        text = sentences(text, f"DALI, with {cores} threads against the DataLoaders' {cores} worker processes"
                           + (" and its decoding and augmenting on the GPU" if cuda else "")
                           + f", made {rate(dali)} from the JPEG folder: "
                           f"{v[DALI_TUNED].words('the tuned DataLoader', bold=True)} and "
                           f"{v[DALI_UNTUNED].words('the untuned one')}.")
        if not cuda:
            if v[DALI_TUNED].kind == FASTER:
                text = sentences(text, f"{LIKELY_START} on a CPU both sides run the same kinds of kernels (libjpeg-turbo, "
                                   "resampling), so what DALI saves is Python per sample, the worker processes and "
                                   "the copies of each batch between processes.")
            elif v[DALI_TUNED].kind in (SAME, SLOWER):
                text = sentences(text, "On this CPU the tuned DataLoader keeps up with DALI.")
        if dali_memmap is not None:
            text = sentences(text, f"Through external_source it made {rate(dali_memmap)} from the memmap: "
                               f"{v[DALI_MEMMAP].words('the DataLoader on the memmap')}.")
            if not cuda and v[DALI_TUNED].kind == FASTER and v[DALI_MEMMAP].kind != FASTER:
                text = sentences(text, "That weighs against the likely cause above: on the memmap too DALI runs no Python "
                                   "per sample and no worker processes, yet " + (
                                       "this run could not tell a gain there" if v[DALI_MEMMAP].kind == verdict.CANNOT_TELL
                                       else "it gained nothing there") + "; this page does not settle what DALI's "
                                   "gain on the folder comes from.")
    return sentences(text, advice(v))


# --- exercise 2 ---------------------------------------------------------------------------------

#: Exercise 2's questions, as :func:`advice` words them.
DL_SCALES, DALI_SCALES, GAINS, AT_ALL = ("the DataLoader on all cores from one worker", "DALI on all cores from one thread",
                                         "the two gains apart", "DALI from the DataLoader on all cores")


def gains(one, many) -> list[float]:
    """Per round of turns, how many times faster ``many`` ran than ``one`` (``one``'s time over
    ``many``'s): positive values where more is better, for :func:`~gpufeed.measure.verdict.compare`
    with ``higher=True``.

    Example:
        >>> from gpufeed.measure.harness import Measurement
        >>> gains(Measurement("1", [2.0, 4.0]), Measurement("2", [1.0, 1.0]))
        [2.0, 4.0]
    """
    return [a / b for a, b in zip(one.samples, many.samples)]


def scaling_verdicts(dl1, dln, dali1, dalin) -> dict[str, Verdict]:
    """Exercise 2's questions, the four arms timed in turns; the gains compared round by round."""
    return {DL_SCALES: compare(dln, dl1, paired=True), DALI_SCALES: compare(dalin, dali1, paired=True),
            GAINS: compare(gains(dali1, dalin), gains(dl1, dln), paired=True, higher=True),
            AT_ALL: compare(dalin, dln, paired=True)}


def scaling(dl1, dln, dali1, dalin, *, cores: int, section7: Verdict | None = None,
            earlier: dict | None = None) -> str:
    """Exercise 2's reading: the DataLoader with 1 worker and ``cores``, DALI with 1 thread and
    ``cores``, all four timed in turns; with ``section7`` (section 7's verdict on DALI against the
    untuned DataLoader, the same two at ``cores``), this run's answer reads it, and with ``earlier``
    (section 7's Measurements of them, ``{"DataLoader": m, "DALI": m}``) its rates are set against
    section 7's (:func:`~gpufeed.course.lesson09.reading.across_cells`)."""
    v = scaling_verdicts(dl1, dln, dali1, dalin)
    lines = [f"{name}: {rate(a)} images/s with 1 {unit}, {rate(b)} with {cores}: {v[key].words(f'one {unit}')} "
             f"(ideal: {cores}x faster)" for name, unit, a, b, key in (("DataLoader", "worker", dl1, dln, DL_SCALES),
                                                                      ("DALI", "thread", dali1, dalin, DALI_SCALES))]
    text = (f"DALI's gain from {cores} threads was "
            f"{v[GAINS].words(f'the DataLoader gain from {cores} workers', more='larger', less='smaller', same='as large')}.")
    if v[GAINS].kind == FASTER:
        text = sentences(text, f"{LIKELY_START} each DataLoader worker is a process that decodes whole batches and copies "
                           "each to this process, while DALI's threads share one pipeline and its buffers.")
    elif v[GAINS].kind == SLOWER:
        text = sentences(text, f"{LIKELY_START} with one thread DALI already overlaps its stages (its executor and prefetch "
                           "queue run beside the thread pool), so a second thread adds less, while one worker does "
                           "everything in turn.")
    if section7 is not None:
        text = sentences(text, f"With {cores} each, DALI {v[AT_ALL].ran('the DataLoader')}.",
                     v[AT_ALL].reads(section7, "section 7"),
                     across_cells(earlier or {}, {"DataLoader": dln, "DALI": dalin}, "section 7",
                                  f"with {cores} workers or threads", {"DALI": "DALI"}))
    return "\n".join(lines) + "\n" + sentences(text, advice(v))


# --- exercise 3 ---------------------------------------------------------------------------------

def decode_ceiling(ceiling, whole, cpu_decode=None, *, cores: int, cuda: bool) -> str:
    """Exercise 3's reading: a pipeline that only reads and decodes on the CPU (``ceiling``) against
    the whole pipeline, timed in turns.

    Args:
        ceiling: the read + decode pipeline. whole: section 7's pipeline (on a CPU it decodes on the
            CPU too: the pipeline the exercise asks for). cpu_decode: on a GPU, the pipeline that
            decodes on the CPU and moves the decoded images with ``.gpu()``; None on a CPU.
    """
    alone = cpu_decode if cpu_decode is not None else whole
    v = {"the whole pipeline from the decode alone": compare(alone, ceiling, paired=True)}
    text = (f"Read + decode on {cores} CPU threads: {rate(ceiling)} images/s. " + (
        "Without a GPU, section 7's pipeline already decodes on the CPU, so it is the pipeline this exercise "
        f"asks for: {rate(whole)} images/s, " if cpu_decode is None else
        f"The pipeline that decodes on the CPU: {rate(cpu_decode)} images/s, ")
        + f"{v['the whole pipeline from the decode alone'].words('the decode alone')}.")
    kind = v["the whole pipeline from the decode alone"].kind
    if kind == SAME:
        text = sentences(text, "The CPU's decode sets the pace (lesson 01): the rest of the pipeline adds no time "
                           "this run can measure.")
    elif kind == SLOWER:
        text = sentences(text, "The rest of the pipeline (crop, flip, normalise) also takes the CPU threads' time: "
                           "decoding alone is not the whole cost.")
    elif kind == FASTER:
        text = sentences(text, f"The decode-only pipeline is no ceiling here. {LIKELY_START} it hands whole decoded images "
                           "to Python, the full one only the crops.")
    if cpu_decode is not None:
        v["the two decoders apart"] = compare(whole, cpu_decode, paired=True)
        text = sentences(text, f"Section 7's pipeline, with the mixed decoder: {rate(whole)} images/s, "
                           f"{v['the two decoders apart'].words('decoding on the CPU', bold=True)}.")
    else:
        text = sentences(text, "With a GPU, device='mixed' moves the inverse DCT and colour conversion there, the "
                           "part of this decode a GPU's nvJPEG takes off the CPU.")
    return sentences(text, advice(v))


# --- section 8: shards --------------------------------------------------------------------------

def shard_findings(epochs: list[list[list[list[int]]]], own: list[set[int]], n_files: int) -> dict:
    """What one reader setting did to two (or more) ranks' epochs.

    Args:
        epochs: per rank, per epoch, the batches the iterator yielded, each a list of file indices.
        own: per rank, the files of its shard. n_files: files in all.

    Returns:
        ``steps`` (per rank, in the first epoch), ``empty`` (an empty batch anywhere), ``foreign``
        (samples of another rank's shard read in the first epoch), ``again`` (reads of a sample the
        same rank had already read in that epoch), ``left_out`` (files no rank read in the first
        epoch), ``repeated`` (a later epoch's batch that is one sample over and over).

    Example:
        >>> shard_findings([[[[0, 1]], [[2, 2]]], [[[2, 3]], [[0, 1]]]], [{0, 1}, {2, 3, 4}], 5)
        {'steps': [1, 1], 'empty': False, 'foreign': 0, 'again': 0, 'left_out': 1, 'repeated': 1}
    """
    first = [rank[0] for rank in epochs]
    read = [i for rank in first for b in rank for i in b]
    return {"steps": [len(rank) for rank in first],
            "empty": any(len(b) == 0 for rank in epochs for ep in rank for b in ep),
            "foreign": sum(i not in own[r] for r, rank in enumerate(first) for b in rank for i in b),
            "again": sum(len(flat) - len(set(flat)) for flat in ([i for b in rank for i in b] for rank in first)),
            "left_out": n_files - len(set(read)),
            "repeated": sum(len(b) > 1 and len(set(b)) == 1 for rank in epochs for ep in rank[1:] for b in ep)}


def _count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the word, singular or plural: ``_count(1, "file")`` is ``"1 file"``.

    Example:
        >>> _count(1, "file"), _count(253, "read"), _count(2, "batch", "batches")
        ('1 file', '253 reads', '2 batches')
    """
    return f"{n} {one if n == 1 else many or one + 's'}"


def _problems(f: dict) -> list[str]:
    out = [] if len(set(f["steps"])) == 1 else [
        f"{' and '.join(map(str, f['steps']))} steps: the rank with more waits in its extra all-reduce (lesson 12)"]
    out += ["an empty batch on a rank (a model with BatchNorm fails on it)"] if f["empty"] else []
    out += [f"{_count(f['foreign'], 'sample')} of another rank's shard, counted twice in the epoch"] if f["foreign"] else []
    out += [f"{_count(f['again'], 'read')} of a sample the same rank had already read (padding)"] if f["again"] else []
    out += [f"the next epoch holds {_count(f['repeated'], 'batch', 'batches')} of one sample over and over (the padding)"] if f["repeated"] else []
    return out


def shard_reading(findings: dict) -> str:
    """Section 8's reading: one line per setting (``findings``: ``(pad_last_batch, policy name)`` to
    :func:`shard_findings`), then which settings to use, from what these runs showed."""
    lines, clean, once = [], [], []
    for (pad, policy), f in findings.items():
        problems = _problems(f)
        left = [f"{_count(f['left_out'], 'file')} left out of the epoch"] if f["left_out"] else []
        lines.append(f"- `pad_last_batch={pad}`, `{policy}`: "
                     + ("; ".join(problems + left) or "same steps on both ranks, every file read once"))
        if not problems:  # fit for training: nothing wrong but, perhaps, files left for later epochs
            clean.append(((pad, policy), f["left_out"]))
        if not left and not _problems({**f, "empty": False}):  # every file once: fit for evaluation
            once.append((pad, policy))
    name = lambda k: f"`pad_last_batch={k[0]}` with `{k[1]}`"  # noqa: E731
    if clean:
        best, left = min(clean, key=lambda c: c[1])
        rec = (f"For training, {name(best)}: in these runs it alone gave every rank the same steps with full "
               "batches, no sample of another shard and none twice" if len(clean) == 1 else
               f"For training, {name(best)}: it gave every rank the same steps, no sample of another shard and none "
               "twice") + (f", at the cost of {_count(left, 'file')} left out of this epoch." if left else ".")
    else:
        rec = "None of these settings gave every rank the same steps with full batches and nothing read twice here."
    if once:
        rec += (f" For evaluation, where every file must count once, {name(once[0])}: every file once, the same steps "
                "on every rank" + (", but skip an empty batch in the loop." if findings[once[0]]["empty"] else "."))
    return "\n".join(lines) + "\n\n" + rec


# --- section 9: others' figures -----------------------------------------------------------------

def published_reading(figures) -> str:
    """Section 9's reading of the published decode figures (:class:`gpufeed.measure.published.Figure`,
    times per 1000 images): the numbers are theirs; the unit, the rate per image and the ratio are ours.

    Example:
        >>> from gpufeed.measure.published import for_lesson
        >>> print(published_reading(for_lesson("lesson10")))  # doctest: +ELLIPSIS
        Theirs (deekay42, ...): ... Ours: the unit, ... 7,834 images/s on the GPU, 393 on one CPU thread (19.9x). ...
    """
    by = {("cuda" if "cuda" in f.id else "cpu"): f for f in figures}
    if set(by) != {"cpu", "cuda"}:
        return ""
    cpu, gpu = by["cpu"], by["cuda"]
    per_s = {k: 1000 / (f.figure * 1e-6) for k, f in by.items()}  # read in microseconds per 1000 images
    return (f"Theirs ({cpu.publisher}, [{cpu.title}]({cpu.url})): the time to decode 1000 JPEGs of 551x676 on "
            f"average, {gpu.number()} in one batched call on the GPU ({gpu.hardware}), {cpu.number()} one image at a "
            "time on one thread of its host CPU; the part of their table we could read prints no unit. Ours: the "
            "unit, and what follows from it. Their script prints the table with torch.utils.benchmark's Compare, "
            "which writes one unit for the whole table under it; microseconds is the unit that agrees with their "
            "own \"Over 8000 imgs/s on 1 A100 GPU\" (in milliseconds the GPU would decode 8 images/s). Read so: "
            f"{per_s['cuda']:,.0f} images/s on the GPU, {per_s['cpu']:,.0f} on one CPU thread "
            f"({cpu.figure / gpu.figure:.1f}x). It is torchvision's nvJPEG decode, the library DALI's mixed decoder "
            "uses, not DALI itself; no run of ours measured it.")
