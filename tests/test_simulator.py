"""The pipeline simulator: steady-state rate, causality, overlap, and the five presets' order."""

import itertools

import pytest

from gpufeed.course.simulator import PRESETS, Costs, Pipeline, preset, simulate, slowest_stage


def by_batch(result, stage):
    """{batch: interval} for a per-batch stage (collate, pin, copy, compute)."""
    out = {}
    for i in result.intervals:
        if i.stage == stage:
            assert i.batch not in out, f"two {stage} intervals for batch {i.batch}"
            out[i.batch] = i
    return out


OVERLAPPED = [  # fully overlapped pipelines (pin, prefetch, GPU prefetch), each bound by another stage
    {},                                                   # compute
    {"decode_ms": 6.0, "workers": 2},                     # the workers
    {"copy_pinned_ms": 40.0},                             # the copy engine
    {"pin_ms": 45.0},                                     # the pin thread
    {"workers": 3, "batch_size": 7, "compute_ms": 12.0},  # compute, with an uneven split of samples
    {"workers": 8, "prefetch": 4, "read_ms": 2.0, "compute_ms": 5.0},
]


@pytest.mark.parametrize("changes", OVERLAPPED, ids=lambda c: ",".join(c) or "default")
def test_steady_state_runs_at_the_slowest_stage_rate(changes):
    p = preset("GPU prefetch", **changes)
    _, ms = slowest_stage(p)
    result = simulate(p, n_batches=60)
    assert result.images_per_s == pytest.approx(p.batch_size * 1000.0 / ms, rel=0.02)


def test_serial_pipeline_runs_at_the_sum_of_its_stages():
    c = Costs()
    for pin in (False, True):
        p = Pipeline(pin=pin)
        per_batch = 32 * (c.read_ms + c.decode_ms) + c.collate_ms + p.copy_ms + c.compute_ms
        per_batch += c.pin_ms if pin else 0.0
        assert simulate(p).ms_per_batch == pytest.approx(per_batch)


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_no_batch_is_copied_before_collated_nor_computed_before_copied(name, jitter):
    result = simulate(preset(name), n_batches=20, jitter=jitter, seed=1)
    collate, pin, copy, compute = (by_batch(result, s) for s in ("collate", "pin", "copy", "compute"))
    assert set(copy) == set(compute) == set(collate) == set(range(20))
    for b in range(20):
        samples = [i for i in result.intervals if i.batch == b and i.stage in ("read", "decode")]
        assert len(samples) == 2 * 32 and max(i.end for i in samples) <= collate[b].start
        ready = pin[b].end if b in pin else collate[b].end
        assert collate[b].end <= (pin[b].start if b in pin else copy[b].start)
        assert ready <= copy[b].start and copy[b].end <= compute[b].start
        if b:
            assert compute[b - 1].end <= compute[b].start and copy[b - 1].end <= copy[b].start


def test_resources_do_one_thing_at_a_time():
    result = simulate(preset("GPU prefetch", workers=3), n_batches=12, jitter=0.2)
    rows = {}
    for i in result.intervals:
        rows.setdefault(i.resource, []).append(i)
    for row in rows.values():
        row.sort(key=lambda i: i.start)
        assert all(a.end <= b.start + 1e-9 for a, b in zip(row, row[1:]))


@pytest.mark.parametrize("pin", [False, True])
def test_one_worker_and_no_prefetch_never_overlap(pin):
    result = simulate(Pipeline(workers=1, prefetch=0, pin=pin), n_batches=8)
    for a, b in itertools.combinations(result.intervals, 2):
        assert a.end <= b.start + 1e-9 or b.end <= a.start + 1e-9, (a, b)


def test_each_preset_is_strictly_faster_than_the_one_before():
    rates = [simulate(preset(name)).images_per_s for name in PRESETS]
    assert list(PRESETS) == ["naive", "pinned", "workers", "CPU prefetch", "GPU prefetch"]
    assert all(a < b for a, b in zip(rates, rates[1:])), rates


def test_jitter_is_repeatable_with_a_seed():
    p = preset("CPU prefetch")
    assert simulate(p, jitter=0.2, seed=3).step_end == simulate(p, jitter=0.2, seed=3).step_end
    assert simulate(p, jitter=0.2, seed=3).step_end != simulate(p, jitter=0.2, seed=4).step_end


def test_utilisation_names_the_bottleneck():
    util = simulate(preset("GPU prefetch")).utilisation()
    assert util["GPU"] == pytest.approx(1.0) and max(util, key=util.get) == "GPU"


def test_costs_from_measured_stage_means():
    c = Costs.from_stage_means({"read": 16.0, "decode": 48.0, "collate": 3.0, "copy": 1.5,
                                "compute": 9.0, "unknown": 1.0}, batch_size=16)
    assert (c.read_ms, c.decode_ms, c.collate_ms, c.copy_pageable_ms, c.compute_ms) == (1.0, 3.0, 3.0, 1.5, 9.0)
    d = Costs()  # pin and pinned copy keep their ratio to the measured pageable copy
    assert c.pin_ms == pytest.approx(d.pin_ms * 1.5 / d.copy_pageable_ms)
    assert c.copy_pinned_ms == pytest.approx(d.copy_pinned_ms * 1.5 / d.copy_pageable_ms)
    given = Costs.from_stage_means({"copy": 1.5, "pin": 0.7, "copy_pinned": 0.4}, batch_size=16)
    assert (given.pin_ms, given.copy_pinned_ms) == (0.7, 0.4)


@pytest.mark.parametrize("copy", [0.0, 0.05, 1.5, 40.0])
def test_pinned_what_if_from_measured_costs_is_not_slower_than_naive(copy):
    measured = Costs.from_stage_means({"read": 2.0, "decode": 30.0, "collate": 0.5, "copy": copy,
                                       "compute": 4.0}, batch_size=8)
    naive = simulate(preset("naive", costs=measured, batch_size=8))
    pinned = simulate(preset("pinned", costs=measured, batch_size=8))
    assert pinned.images_per_s >= naive.images_per_s * (1 - 1e-9)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="decode_ms"):
        Costs(decode_ms=-1)
    with pytest.raises(ValueError, match="workers"):
        Pipeline(workers=0)
    with pytest.raises(KeyError, match="no preset"):
        preset("fastest")
    with pytest.raises(ValueError, match="n_batches"):
        simulate(Pipeline(), n_batches=2)
    assert preset("naive").but(compute_ms=5.0, workers=2).costs.compute_ms == 5.0


def test_the_gpu_prefetch_thread_overlaps_a_loader_that_loads_only_when_asked():
    """Lesson 08's CudaPrefetcher asks the loader from a thread of its own: with a loader that
    loads a batch only when asked (one worker, no prefetch) and a loop that syncs every step, a
    batch costs the longer of loading and the step, not their sum (issue 29)."""
    c = Costs(read_ms=0.0, decode_ms=1.0, collate_ms=0.0, pin_ms=0.0, copy_pinned_ms=1.0, compute_ms=32.0)
    serial = simulate(Pipeline(batch_size=32, pin=True, costs=c), n_batches=40)
    threaded = simulate(Pipeline(batch_size=32, pin=True, gpu_prefetch=True, costs=c), n_batches=40)
    load_ms, step_ms = 32 * c.decode_ms + c.copy_pinned_ms, c.compute_ms
    assert serial.images_per_s == pytest.approx(32e3 / (load_ms + step_ms), rel=0.02)
    assert threaded.images_per_s == pytest.approx(32e3 / max(load_ms, step_ms), rel=0.05)
