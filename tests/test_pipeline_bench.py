"""``python -m gpufeed bench`` end to end at tiny sizes: valid records, plots, one-line errors."""

import json

import pytest

from gpufeed.cli import main
from gpufeed.measure import bench_report
from gpufeed.measure import dali as gdali
from gpufeed.measure import suite as pb


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def columns(md: str) -> list[str]:
    """The header cells of the Markdown table in ``md``."""
    return cells(next(line for line in md.splitlines() if line.startswith("| pipeline")))


def pipelines_in(md: str) -> list[str]:
    """The first cell of each body row of the table in ``md``."""
    rows = [line for line in md.splitlines() if line.startswith("|")]
    return [cells(line)[0] for line in rows[2:]]


#: The tests that read :func:`tiny_run` keep to one xdist worker (``--dist loadgroup``): a module
#: fixture is made once per worker, and the tiny bench takes seconds.
TINY_RUN = pytest.mark.xdist_group("pipeline-bench-tiny-run")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--size", "tiny", "--device", "cpu", "--repeats", "1", "--out", str(out)]) == 0
    return out


@TINY_RUN
def test_writes_one_record_per_pipeline_and_mode(tiny_run):
    doc = json.loads((tiny_run / pb.FILE).read_text())
    assert doc["kind"] == pb.FORMAT and doc["device"] == "cpu" and doc["threads"] == 1
    assert doc["machine"]["cpu"] and doc["workload"]["crop"] == 32
    expected = ["naive", "tuned", "course"] + (["dali"] if gdali.available() else [])
    loaders = ["naive", "tuned", "course", "course_uint8"] + (["dali"] if gdali.available() else [])
    cases = [(r["pipeline"], r["mode"]) for r in doc["records"]]
    assert cases == [(p, "loader") for p in loaders] + [(p, "train") for p in expected + ["resident"]]
    for r in doc["records"]:
        assert r["images_per_s"] > 0 and r["median_s"] > 0 and r["iqr_s"] >= 0
        low, high = r["images_per_s_iqr"]
        assert low <= r["images_per_s"] <= high
        assert r["fraction_of_ceiling"] > 0
        base = next(b["images_per_s"] for b in doc["records"] if b["pipeline"] == "naive" and b["mode"] == r["mode"])
        ratio = r["images_per_s"] / base
        # Both rates are rounded to 0.1 images/s and the ratio to 0.01: on a busy machine a tiny
        # run trains at a few images/s, where the rates' rounding alone moves the ratio by over 1%.
        rounding = ratio * (0.05 / r["images_per_s"] + 0.05 / base) + 0.005
        assert r["ratio_to_naive"] == pytest.approx(ratio, rel=0.01, abs=rounding)
    resident = next(r for r in doc["records"] if r["pipeline"] == "resident")
    assert resident["fraction_of_ceiling"] == 1.0
    assert doc["ceilings"]["loader_images_per_s"] > 0 and doc["ceilings"]["wire"].startswith("memcpy")
    assert doc["memmap_build_s"] > 0
    stream, fetch = doc["ceilings"]["memcpy_stream_images_per_s"], doc["ceilings"]["batch_fetch_images_per_s"]
    assert stream > 0 and fetch > 0 and doc["peers"] == []
    for r in doc["records"]:
        if r["mode"] == "loader":  # every loader as a fraction of both honest bounds, its memory beside
            assert r["fraction_of_memcpy_stream"] == pytest.approx(r["images_per_s"] / stream, rel=0.01)
            assert r["fraction_of_batch_fetch"] == pytest.approx(r["images_per_s"] / fetch, rel=0.01)
            assert r["peak_pss_mb"] is None or r["peak_pss_mb"] > 10
            assert r["cores_busy"] > 0  # the process and its workers: CPU seconds over wall seconds
    assert "cores busy" in columns(bench_report.markdown(doc))
    c = doc["ceilings"]  # the raw fetch over the stream of the same run, and the course's bandwidth bounds
    assert c["fetch_of_stream"] == pytest.approx(fetch / stream, rel=0.01)
    loader = {r["pipeline"]: r for r in doc["records"] if r["mode"] == "loader"}
    assert set(c["bandwidth_bound"]) == {"course", "course_uint8"}
    for name, bound in c["bandwidth_bound"].items():
        assert bound["bytes_per_image"] == 3 * 32 * 32 * (1 + pb.OUT_ITEMSIZE[name])
        assert loader[name]["fraction_of_bandwidth_bound"] == pytest.approx(
            loader[name]["images_per_s"] / bound["images_per_s"], rel=0.01)
    assert "fraction_of_bandwidth_bound" not in loader["naive"]


@TINY_RUN
def test_plots_and_summary(tiny_run, capsys):
    assert (tiny_run / "bench-loader.png").stat().st_size > 10_000
    assert (tiny_run / "bench-train.png").stat().st_size > 10_000
    assert (tiny_run / "bench-memory.png").stat().st_size > 10_000
    table = pb.summary(pb.load(tiny_run))
    assert table.splitlines()[0].split()[:2] == ["pipeline", "mode"] and "course" in table
    assert "memcpy stream" in table.splitlines()[-4]
    assert table.splitlines()[-3].startswith("raw batch fetch: ")
    assert [line.split(":")[0] for line in table.splitlines()[-2:]] == ["course", "course_uint8"]
    md = bench_report.markdown(pb.load(tiny_run))
    cols = columns(md)
    assert cols[cols.index("of memcpy stream"):][:3] == ["of memcpy stream", "of raw fetch", "peak memory (PSS), MB"]
    assert "course" in pipelines_in(md)


def test_load_refuses_other_files(tmp_path):
    from gpufeed.measure.harness import save

    save(tmp_path / "results.json", [])
    with pytest.raises(ValueError, match="not a `gpufeed bench` results file"):
        pb.load(tmp_path)


def test_bad_arguments_are_one_line(capsys, tmp_path):
    assert main(["bench", "--size", "tiny", "--out", str(tmp_path), "--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --repeats must be 1 or more (got 0)"


def test_the_readme_quotes_the_committed_results():
    """The README's benchmark table is `markdown()` of each committed results.json, word for word."""
    from pathlib import Path

    from gpufeed.course.lesson11.efficiency import committed_bench

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    committed = [(path, doc) for path, doc in committed_bench() if path.is_relative_to(root)]
    assert committed, "no committed benchmark results: run `python -m gpufeed bench --quick --out results/<machine>`"
    for path, doc in committed:
        block = bench_report.markdown(doc)
        assert block in readme, f"README.md does not quote {path.relative_to(root)}: paste\n{block}"
        if doc["quick"] and doc["device"] == "cpu":  # the bar for a 2-core CPU-only machine
            loader = {r["pipeline"]: r for r in doc["records"] if r["mode"] == "loader"}
            assert loader["course"]["ratio_to_naive"] >= 20
            assert loader["course"]["images_per_s"] > loader["tuned"]["images_per_s"]



@TINY_RUN
def test_the_gpu_size_trains_the_efficiency_bar_s_resnet50(tiny_run):
    """Loader efficiency on a GPU is measured where the course sets its bar: a ResNet-50, bf16,
    channels-last, 224x224 crops, batches of 256 (the CPU sizes keep the ResNet-18)."""
    import torchvision

    from gpufeed.measure import pipelines

    gpu = pipelines.workload(False, "cuda")
    assert (gpu.model, gpu.crop, gpu.batch) == ("resnet50", 224, 256)
    assert {pipelines.workload(True, "cuda").model, pipelines.workload(False, "cpu").model} == {"resnet18"}
    model, _ = pb.make_model(pipelines.Workload(n=4, jpeg_size=(64, 48), resize=40, crop=32, batch=2,
                                                model="resnet50"), "cpu")
    assert isinstance(model, torchvision.models.ResNet) and model.fc.in_features == 2048  # ResNet-50's width
    doc = pb.load(tiny_run)
    assert doc["workload"]["model"] == "resnet18" and "with a ResNet-18 step, images/s" in columns(bench_report.markdown(doc))
    doc["workload"]["model"] = "resnet50"
    assert "with a ResNet-50 step, images/s" in columns(bench_report.markdown(doc))
    del doc["workload"]["model"]  # a file from before the field
    assert "with a ResNet-18 step, images/s" in columns(bench_report.markdown(doc))
    with pytest.raises(ValueError, match="model must be one of"):
        pipelines.Workload(n=4, jpeg_size=(64, 48), resize=40, crop=32, batch=2, model="vit")


@pytest.mark.parametrize(("fetch", "fraction", "words"), [
    (1.0, 1.0, ("100% of the streaming copy", "100% of its bandwidth bound")),  # a tie
    (0.62, 0.35, ("62% of the streaming copy", "35% of its bandwidth bound")),  # below
    (1.19, 1.02, ("119% of the streaming copy", "102% of its bandwidth bound")),  # above: the same words
])
def test_bound_lines_read_the_run_either_way(fetch, fraction, words):
    doc = {"ceilings": {"fetch_of_stream": fetch, "stream_gb_per_s": 10.0,
                        "bandwidth_bound": {"course": {"bytes_per_image": 752640, "images_per_s": 13286.6}}},
           "records": [{"pipeline": "course", "mode": "loader", "images_per_s": 13286.6 * fraction,
                        "fraction_of_bandwidth_bound": fraction},
                       {"pipeline": "course", "mode": "train", "images_per_s": 1.0}]}
    fetch_line, course_line = bench_report.bound_lines(doc)
    assert words[0] in fetch_line and "(this run)" in fetch_line
    assert course_line.startswith(f"course: {words[1]}, 13,287 images/s (752,640 bytes")


def test_bound_lines_of_an_older_file_are_none():
    """A results file from before the fetch fraction was measured (the committed ones) prints as before."""
    assert bench_report.bound_lines({"ceilings": {"memcpy_stream_images_per_s": 1.0}, "records": []}) == []
