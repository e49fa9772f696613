import json

from gpufeed.measure import results
from gpufeed.measure.harness import Measurement, save


def test_save_lesson_goes_to_the_machine_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFEED_RESULTS", str(tmp_path))
    path = results.save_lesson("lesson99", [Measurement("a", [1.0])])
    assert path.parent.parent == tmp_path and json.loads(path.read_text())["measurements"][0]["name"] == "a"


def test_reference_prefers_gpu_results(monkeypatch, tmp_path):
    gpu = {"gpu": "NVIDIA H200", "cpu": "x", "cores": 16}
    save(tmp_path / "cpu-x" / "lesson99.json", [Measurement("cpu", [1.0], machine={"gpu": None})])
    save(tmp_path / "h200" / "lesson99.json", [Measurement("H2D pinned", [1.0], machine=gpu)])
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    ms, doc = results.reference("lesson99")
    assert ms[0].name == "H2D pinned" and doc["machine"]["gpu"] == "NVIDIA H200"
    assert results.reference("lesson99", need_gpu=False) is not None
    assert results.reference("missing") is None


def test_a_quick_mode_file_is_never_a_reference(monkeypatch, tmp_path):
    """Quick mode measures tiny sizes: its files say a lesson ran, not what a GPU does."""
    gpu = {"gpu": "NVIDIA H100 80GB HBM3"}
    save(tmp_path / "a-h100" / "lesson99.json", [Measurement("quick", [1.0])], machine={**gpu, "quick": True})
    save(tmp_path / "b-h100" / "lesson99.json", [Measurement("flagged", [1.0])], machine=gpu, quick=True)
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    assert results.reference("lesson99") is None and list(results.committed("lesson99")) == []
    save(tmp_path / "c-h100" / "lesson99.json", [Measurement("full", [1.0])], machine={**gpu, "quick": False}, dali=True)
    assert results.reference("lesson99")[0][0].name == "full"
    assert [ms[0].name for ms, _ in results.committed("lesson99", lambda doc: doc.get("dali"))] == ["full"]


def test_committed_results_are_readable():
    for root in results.reference_roots():
        for path in root.glob("*/*.json"):
            if path.name in ("references.json", "run.json"):  # a GPU's references and its run (tools/gpurun): no measurement
                continue
            from gpufeed.measure.harness import load

            ms, doc = load(path)
            assert doc["machine"], path
