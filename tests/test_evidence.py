"""Every lesson's evidence box (gpufeed.measure.evidence): each headline claim names its evidence,
every reference and published figure it names exists, and the box says what a run without a GPU
measures, what our GPU run measured (and whether it ran today's code), and what nobody has yet."""

import json
import subprocess
import sys

import pytest

from gpufeed.measure import evidence, published, results
from gpufeed.measure.lessons import LESSONS, Claim

FIGURES = {f.id: f for f in published.load()}


@pytest.mark.parametrize("x", LESSONS, ids=lambda x: x.number)
def test_every_lesson_has_one_to_three_claims_each_with_its_evidence(x):
    assert 1 <= len(x.claims) <= 3, f"lesson {x.number}: one to three headline claims"
    for claim in x.claims:
        assert claim.says.endswith(".") and len(claim.says) < 240, claim.says
        assert claim.here or claim.gpu, f"lesson {x.number}: {claim.says!r} names no evidence"
        assert not claim.needs_cuda or claim.here, "a claim measured only with CUDA says what it measures"
        for fid in claim.published:
            assert fid in FIGURES, f"lesson {x.number}: no published figure {fid!r} in results/published.json"
            assert x.owner in FIGURES[fid].lessons, f"{fid} does not list {x.owner} among its lessons"
        if claim.reference is not None:  # a named reference exists, committed from a GPU
            assert results.committed_files(claim.reference, results.has_gpu), \
                f"lesson {x.number}: no committed GPU result {claim.reference}.json"
        for cuda in (False, True):
            kinds = [s.kind for s in evidence.sources(claim, x.number, cuda)]
            assert kinds, f"lesson {x.number}: {claim.says!r} has no source with cuda={cuda}"


@pytest.mark.parametrize("x", LESSONS, ids=lambda x: x.number)
def test_the_box_renders_every_claim_and_names_each_kind(x):
    for cuda in (False, True):
        text = evidence.box(x.number, cuda)
        assert text.startswith("**Evidence on this page**")
        for i, claim in enumerate(x.claims, 1):
            assert f"{i}. {claim.says}" in text
        kinds = {k for k in (evidence.MEASURED_HERE, evidence.OUR_GPU, evidence.PUBLISHED, evidence.NOT_YET,
                             evidence.ON_A_GPU) if f"*{k}*" in text}
        assert kinds, text


def test_a_gpu_claim_without_a_reference_or_figure_is_not_yet_measured():
    src = evidence.sources(Claim("x.", here="the host's side", gpu=True), "99", cuda=False)
    assert [s.kind for s in src] == [evidence.MEASURED_HERE, evidence.NOT_YET]
    # With CUDA the page measures it itself: no reference needed.
    src = evidence.sources(Claim("x.", here="the copies", needs_cuda=True, gpu=True), "99", cuda=True)
    assert [s.kind for s in src] == [evidence.MEASURED_HERE]
    src = evidence.sources(Claim("x.", here="the copies", needs_cuda=True, gpu=True), "99", cuda=False)
    assert [s.kind for s in src] == [evidence.ON_A_GPU, evidence.NOT_YET]


def test_published_figures_are_labelled_as_theirs_with_hardware_and_link():
    claim = Claim("x.", gpu=True, published=("h2d-pinned-gtx680", "h2d-pageable-gtx680"))
    (src,) = evidence.sources(claim, "00", cuda=False)
    assert src.kind == evidence.PUBLISHED and src.link.startswith("https://")
    assert "GeForce GTX 680" in src.text and "NVIDIA Technical Blog" in src.text
    assert "6.186581 GB/s" in src.text and "5.368503 GB/s" in src.text


def test_our_gpu_reference_says_which_gpu_when_and_whether_it_ran_todays_code(tmp_path, monkeypatch):
    from gpufeed.measure import references
    from gpufeed.measure.harness import save

    gpu = tmp_path / "results" / "fake-gpu"
    path = save(gpu / "lesson99.json", [], machine={"gpu": "Fake GPU 80GB"})
    doc = json.loads(path.read_text())
    doc["date"] = "2026-11-28T10:00:00+00:00"
    path.write_text(json.dumps(doc))
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "99_x.py").write_text("x = 1\n")
    (tmp_path / "src" / "gpufeed").mkdir(parents=True)
    (tmp_path / "src" / "gpufeed" / "a.py").write_text("A = 1\n")
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path / "results"])
    monkeypatch.setattr(references, "ROOT", tmp_path)
    entry = references.record("notebooks/99_x.py", ["lesson99.json"], "abc", 10.0, "2026-11-28",
                              references.tree_files(tmp_path))
    references.save(gpu, {"lesson99": entry}, "Fake GPU 80GB")
    claim = Claim("x.", gpu=True)
    (src,) = evidence.sources(claim, "99", cuda=False)
    assert src.kind == evidence.OUR_GPU and src.fresh is True
    assert src.text == "Fake GPU 80GB, measured 2026-11-28; it ran today's code"
    (tmp_path / "notebooks" / "99_x.py").write_text("x = 2\n")
    (src,) = evidence.sources(claim, "99", cuda=False)
    assert src.fresh is False and src.text.endswith("it ran an older version of this lesson")
    (tmp_path / "notebooks" / "99_x.py").write_text("x = 1\n")
    (tmp_path / "src" / "gpufeed" / "a.py").write_text("A = 2\n")
    (src,) = evidence.sources(claim, "99", cuda=False)
    assert src.fresh is False and src.text.endswith("it ran an older version of the gpufeed package")


def test_the_newest_committed_reference_comes_first(tmp_path, monkeypatch):
    from gpufeed.measure.harness import save

    for gpu, date in (("a-older", "2026-11-26"), ("b-newer", "2026-11-29"), ("c-undated", None)):
        path = save(tmp_path / gpu / "lesson99.json", [], machine={"gpu": gpu})
        doc = json.loads(path.read_text())
        doc["date"] = date
        path.write_text(json.dumps(doc))
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    assert [p.parent.name for p, _, _ in results.committed_files("lesson99")] == ["b-newer", "a-older", "c-undated"]
    assert results.reference("lesson99")[1]["machine"]["gpu"] == "b-newer"


def test_lacks_gpu_number_follows_the_committed_references():
    by_number = {x.number: x for x in LESSONS}
    assert not evidence.lacks_gpu_number(by_number["06"])  # no GPU claim
    assert evidence.lacks_gpu_number(by_number["03"])  # a GPU claim, nothing of ours committed


def test_reading_the_registry_and_the_box_imports_no_torch():
    code = ("import sys, gpufeed.measure.lessons, gpufeed.measure.evidence as e; e.box('08', cuda=False); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
