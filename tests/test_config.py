import pytest
import torch

from gpufeed import config


def test_quick_mode_reads_the_variable_each_time(monkeypatch):
    monkeypatch.setenv("GPUFEED_QUICK", "1")
    assert config.quick_mode() and config.pick(quick="q", full="f") == "q"
    monkeypatch.setenv("GPUFEED_QUICK", "0")
    assert not config.quick_mode() and config.pick(quick="q", full="f") == "f"
    monkeypatch.delenv("GPUFEED_QUICK")
    assert not config.quick_mode()


def test_a_misspelt_flag_is_an_error_not_a_silent_no(monkeypatch):
    monkeypatch.setenv("GPUFEED_QUICK", "yes please")
    with pytest.raises(ValueError, match="GPUFEED_QUICK"):
        config.quick_mode()


def test_cache_and_results_folders_follow_the_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "c"))
    monkeypatch.delenv("GPUFEED_RESULTS", raising=False)
    assert config.cache_dir() == tmp_path / "c"
    assert config.results_dir() == tmp_path / "c" / "results"
    assert not (tmp_path / "c").exists()  # asking creates nothing
    monkeypatch.setenv("GPUFEED_RESULTS", str(tmp_path / "r"))
    assert config.results_dir() == tmp_path / "r"


def test_cache_defaults_to_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUFEED_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.cache_dir() == tmp_path / "gpufeed"


def test_device_falls_back_to_cpu_unless_cuda_is_required(monkeypatch):
    monkeypatch.delenv("GPUFEED_REQUIRE_CUDA", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert config.device().type == expected
    assert config.device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        monkeypatch.setenv("GPUFEED_REQUIRE_CUDA", "1")
        with pytest.raises(RuntimeError, match="CUDA was required"):
            config.device()
        with pytest.raises(RuntimeError):
            config.device("cpu")  # the GPU runner must never quietly run on the CPU


def test_repo_root_is_this_checkout():
    root = config.repo_root()
    assert root is not None and (root / "notebooks").is_dir()
