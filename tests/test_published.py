"""Figures others published (results/published.json) and the cells that fall back on them."""

import json
import re
from pathlib import Path

import pytest

from gpufeed.measure import published, results
from gpufeed.measure.harness import Measurement, save

ROOT = Path(__file__).resolve().parents[1]
LESSONS = {f"lesson{p.name[:2]}" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")}


def test_every_committed_figure_is_complete_and_names_a_lesson():
    figures = published.load()
    assert figures, "results/published.json holds figures"
    for f in figures:
        assert set(f.lessons) <= LESSONS, f"{f.id} names a lesson that does not exist: {f.lessons}"
        assert f.figure > 0 and f.unit and f.hardware and f.quote and f.measured
        assert f.url.startswith("https://") and " " not in f.url
        assert f.label() == f"published by {f.publisher}, on {f.hardware}, not measured here"
        assert f.url in f.text() and "not measured here" in f.text()


def test_every_quote_holds_its_number_as_published():
    """The figure is the number the quote shows: not rounded, not converted."""
    for f in published.load():
        number = str(int(f.figure)) if f.figure.is_integer() else repr(f.figure)
        assert number in f.quote.replace(",", ""), f"{f.id}: {number} is not in its quote"


def test_the_storage_ladder_has_nvme_raid_and_network_storage():
    """Lesson 00's ladder sets this machine's reads beside published NVMe, RAID-0 and network storage."""
    ladder = [f for f in published.for_lesson("lesson00") if not f.id.startswith("h2d-")]
    kinds = {f.id.split("-")[0] for f in ladder}
    assert kinds == {"nvme", "raid0", "efs"}, kinds
    for f in ladder:
        assert f.unit in ("GB/sec", "MiBps") and "not measured here" in f.label()
        assert f.url.startswith("https://github.com/")  # a source whose text can be read whole and checked


def test_the_wheel_carries_the_figures_for_colab():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"results/published.json" = "gpufeed/measure/_results/published.json"' in pyproject


def write(tmp_path, figures) -> Path:
    path = tmp_path / "published.json"
    path.write_text(json.dumps({"figures": figures}))
    return path


GOOD = {"id": "x", "lessons": ["lesson00"], "figure": 6.19, "unit": "GB/s", "measured": "a 16 MB copy",
        "hardware": "GPU Z", "publisher": "Someone", "title": "A post", "url": "https://example.org/post",
        "quote": "section 2: '6.19'"}


@pytest.mark.parametrize("change, message", [
    ({"hardware": ""}, "lacks hardware"),
    ({"figure": "6.19"}, "'figure' must be the number as published"),
    ({"url": "example.org"}, "must be an https:// link"),
    ({"source": "?"}, "unknown fields"),
])
def test_a_bad_figure_is_refused_with_the_file_and_what_to_fix(tmp_path, change, message):
    path = write(tmp_path, [{**GOOD, **change}])
    with pytest.raises(ValueError, match=re.escape(str(path))) as e:
        published.load(path)
    assert message in str(e.value) and "'x'" in str(e.value)


def test_a_bad_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        published.load(write(tmp_path, [GOOD, GOOD]))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json: not valid JSON"):
        published.load(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="no such file"):
        published.load(tmp_path / "missing.json")


def test_show_labels_every_figure_as_theirs(tmp_path, capsys):
    path = write(tmp_path, [GOOD, {**GOOD, "id": "y", "lessons": ["lesson03"]}])
    shown = published.show("lesson00", path)
    out = capsys.readouterr().out
    assert [f.id for f in shown] == ["x"] and out.count(", not measured here") == 1
    assert "6.19 GB/s: a 16 MB copy" in out and "published by Someone, on GPU Z" in out and GOOD["url"] in out


def test_without_our_reference_the_cell_shows_theirs(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path / "none"])
    assert results.gpu_reference("lesson00") is None
    out = capsys.readouterr().out
    assert "no GPU measurement of ours is committed (results/<gpu>/lesson00.json)" in out
    assert "published by NVIDIA Technical Blog" in out and "not measured here" in out


def test_with_our_reference_the_cell_shows_ours_only(monkeypatch, tmp_path, capsys):
    save(tmp_path / "h200" / "lesson00.json", [Measurement("H2D pinned", [1.0], machine={"gpu": "NVIDIA H200"})])
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    assert results.gpu_reference("lesson00") is not None
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "published by" not in out


def test_installed_from_a_wheel_the_figures_come_from_the_package(monkeypatch):
    """Colab installs gpufeed from git without the checkout: pyproject's force-include puts the file there."""
    monkeypatch.setattr(published.config, "repo_root", lambda: None)
    assert published.default_path() == Path(published.__file__).with_name("_results") / "published.json"


def test_a_time_per_thousand_images_is_also_given_per_image_and_per_second():
    from gpufeed.measure.published import Figure

    def fig(figure, unit):
        return Figure("x", ("lesson04",), figure, unit, "decode", "A100", "someone", "a PR", "https://x", "q")

    assert fig(2541465.3, "us per 1000 images").reading() == " (2.54 ms per image, 393 images/s)"
    assert fig(1000.0, "us per 1000 images").reading() == " (1.00 us per image, 1,000,000 images/s)"
    assert fig(2470.0, "images/s").reading() == ""  # already a reader's unit
    assert fig(0.0, "us per 1000 images").reading() == ""  # nothing to divide
    assert "us per 1000 images (2.54 ms per image, 393 images/s): decode" in fig(2541465.3, "us per 1000 images").text()


def test_a_published_rate_in_an_unknown_unit_is_refused_by_name():
    odd = published.Figure("x", ("lesson00",), 3.0, "furlongs/s", "m", "h", "p", "t", "https://example.org", "q")
    with pytest.raises(ValueError, match="'x': its unit 'furlongs/s' is not a rate"):
        _ = odd.gb_per_s
