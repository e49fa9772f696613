"""``gpufeed.measure.dataloaders``: a DataLoader copied with another setting, and the settings a finding
suggests re-timed first: suggested only with a measured gain, "cannot tell" said as such."""

from __future__ import annotations

import pytest
import torch
from devicequeue import PerSample, when_quiet
from torch.utils.data import DataLoader, IterableDataset

from gpufeed.measure import dataloaders, diagnose, findings
from gpufeed.measure.batches import Batches
from gpufeed.measure.dataloaders import Retimed, candidates, copy_with, retime
from gpufeed.measure.machine import usable_cores
from gpufeed.measure.report import Report
from gpufeed.measure.verdict import compare


class Stream(IterableDataset):
    def __iter__(self):
        return iter([(torch.zeros(3), 0)] * 8)


def test_a_copy_keeps_the_dataset_sampler_and_collate_and_changes_one_setting():
    collate = lambda s: s  # noqa: E731
    loader = DataLoader(PerSample(8, ms=0), batch_size=4, shuffle=True, num_workers=2, collate_fn=collate, drop_last=True)
    copy = copy_with(loader, num_workers=0)
    assert copy.dataset is loader.dataset and copy.batch_sampler is loader.batch_sampler
    assert copy.collate_fn is collate and copy.num_workers == 0 and copy.prefetch_factor is None
    assert len(copy) == len(loader) == 2
    unbatched = DataLoader(PerSample(8, ms=0), batch_size=None)
    assert copy_with(unbatched, num_workers=1).sampler is unbatched.sampler
    assert copy_with(DataLoader(Stream(), batch_size=4), num_workers=0).batch_size == 4


def test_only_a_plain_dataloader_and_a_map_style_dataset_are_retimed_for_workers():
    class Mine(DataLoader):
        pass

    def keys(loader, found, cuda=False):
        return [(r.finding, r.setting, r.note) for r in candidates(loader, found, cores=2, cuda=cuda)]

    plain = DataLoader(PerSample(8, ms=0), batch_size=4)
    assert keys(plain, ["workers", "pageable"]) == [("workers", "num_workers=2", "")]  # no CUDA: no pinning
    assert keys(plain, ["pageable"], cuda=True) == [("pageable", "pin_memory=True", "")]
    assert keys(plain, ["overlap", "loader-slow"]) == []
    assert "subclass" in keys(Mine(PerSample(8, ms=0), batch_size=4), ["workers"])[0][2]
    assert "IterableDataset" in keys(DataLoader(Stream(), batch_size=4), ["workers"])[0][2]
    assert candidates(iter([]), ["workers"], cores=2, cuda=False) == []  # not a DataLoader: nothing to copy


def retimed(new, base, note=""):
    r = Retimed("workers", {"num_workers": 2}, 0, "the loader alone", items=8, new=new, base=base, note=note)
    r.verdict = None if note else compare(new, base, paired=True)
    return r


WORKERS = Report(items=8, batches=5, device="cpu", period_s=0.1, host_wait_s=0.09, loader_rate=100.0,
                 model_rate=1000.0, loader_settings={"num_workers": 0}, cores=2)


@pytest.mark.parametrize(("new", "base", "note", "kept", "words"), [
    ([0.05, 0.051, 0.049, 0.05, 0.05], [0.1, 0.1, 0.101, 0.099, 0.1], "", True, "Re-timed with num_workers=2: 160 images/s"),
    ([0.1, 0.1, 0.101, 0.099, 0.1], [0.05, 0.051, 0.049, 0.05, 0.05], "", False, ""),  # slower: not suggested
    ([0.1, 0.101, 0.099, 0.1, 0.1], [0.1, 0.1, 0.1, 0.101, 0.099], "", False, ""),  # the same: no gain
    ([0.05, 0.2, 0.08, 0.15, 0.1], [0.1, 0.09, 0.12, 0.08, 0.11], "", False, ""),  # cannot tell: not suggested
    ([0.05, 0.05], [0.1, 0.1], "", False, ""),  # 2 samples per arm: cannot tell
    ([], [], "12 calls of 5 batches at 80.0 ms each do not fit the budget", True, "(Not re-timed: 12 calls"),
])
def test_a_setting_is_suggested_only_with_a_measured_gain(new, base, note, kept, words):
    WORKERS.retimed = [retimed(new, base, note)]
    keys = [f.key for f in findings.find(WORKERS)]
    assert ("workers" in keys) == kept and "overlap" in keys  # the other findings stand
    if kept:
        (f,) = [f for f in findings.find(WORKERS) if f.key == "workers"]
        assert words in f.text
        assert ("retimed_ratio" in f.evidence) == (not note)
    assert "re-timed: num_workers=2" in WORKERS.table()  # the table says what was re-timed, gain or not


def test_the_words_of_a_retimed_setting():
    r = retimed([0.05] * 5, [0.1] * 5)
    assert r.words() == ("with num_workers=2: 160 images/s (the loader alone), against 80.0 images/s with "
                         "num_workers=0: 2.00x faster (2.00x to 2.00x)")
    start = Retimed("persistent-workers", {"persistent_workers": True}, False, "an epoch's start", new=[0.002] * 5,
                    base=[0.5] * 5, verdict=compare([0.002] * 5, [0.5] * 5, paired=True))
    assert start.words().startswith("with persistent_workers=True: 2.00 ms (an epoch's start), against 500 ms with "
                                    "persistent_workers=False: 250.00x faster")
    assert retimed([], [], note="over budget").words() == "num_workers=2: not re-timed (over budget)"


@pytest.mark.skipif(usable_cores() < 2, reason="workers can only beat the main process with a core to run on")
@when_quiet
def test_workers_that_measure_faster_are_suggested_with_their_rate():
    loader = DataLoader(PerSample(64, ms=20), batch_size=4, num_workers=0)  # 80 ms a batch, asleep: workers help
    r = diagnose(loader, lambda batch: None, batches=5, warmup=1, probe=1, fixes=8)
    (t,) = r.retimed
    assert t.setting == "num_workers=2" and t.gain and len(t.new) == len(t.base) == 5, t.words()
    (f,) = [f for f in r.findings if f.key == "workers"]
    assert "Re-timed with num_workers=2:" in f.text and "faster" in f.text
    assert "re-timed: num_workers=2" in r.table()


@when_quiet
def test_workers_that_measure_no_gain_are_not_suggested():
    loader = DataLoader(PerSample(256, ms=0), batch_size=4, num_workers=0)  # nothing to do per sample: workers only add IPC
    r = diagnose(loader, lambda batch: None, batches=5, warmup=1, probe=1, fixes=6)
    if r.bound == "compute":
        pytest.skip("this run saw the loop compute bound: no workers finding to re-time")
    (t,) = r.retimed
    assert not t.gain and "workers" not in [f.key for f in r.findings], t.words()


@when_quiet
def test_persistent_workers_are_timed_on_an_epoch_start():
    loader = DataLoader(PerSample(16, ms=0), batch_size=4, num_workers=1)
    base = Batches(loader, needed=100)
    next(base)
    (t,) = retime(loader, [Retimed("persistent-workers", {"persistent_workers": True}, False, "an epoch's start")],
                  base, items=4, batch_s=0.01, start_s=base.start_s, device="cpu", sync=lambda: None, budget_s=30)
    assert len(t.new) == len(t.base) == 5 and t.gain, t.words()  # workers reused against workers started


def test_a_setting_that_does_not_fit_the_budget_is_not_retimed():
    loader = DataLoader(PerSample(16, ms=0), batch_size=4, num_workers=0)
    todo = [Retimed("workers", {"num_workers": 2}, 0, "the loader alone")]
    (t,) = retime(loader, todo, Batches(loader, 10), items=4, batch_s=1.0, start_s=0.0, device="cpu",
                  sync=lambda: None, budget_s=2)
    assert t.new == [] and "do not fit the budget" in t.note and not t.gain
    assert dataloaders.prefetched(loader) == 0
