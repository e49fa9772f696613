"""The model's side of lesson 11: eager and compiled inference, TensorRT's check, the loader's headroom."""

import pytest
import torch

from gpufeed.course.lesson11 import engines


def tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2))


def test_inference_runs_a_copy_in_eval_mode_and_leaves_the_training_model_alone():
    net, x = tiny(), torch.randn(5, 3, 8, 8)
    forward = engines.inference(net, "cpu")
    assert net.training and not forward.module.training and forward.module is not net
    out = forward(x)
    assert torch.equal(out, net.eval()(x))  # BatchNorm with its running statistics, as in eval mode
    assert out.is_inference()


def test_a_compiled_forward_is_checked_against_eager():
    x = torch.randn(5, 3, 8, 8)
    forward = engines.inference(tiny(), "cpu")
    fast, note = engines.compiled_inference(forward, x, "cpu", backend="eager")  # dynamo only: no C++ compiler needed
    assert fast is not None and note.startswith("compiled in")
    assert engines.agreement(fast(x), forward(x)) <= engines.tolerance("cpu")


def test_a_compiler_that_fails_or_changes_the_output_is_reported_not_raised():
    x = torch.randn(5, 3, 8, 8)
    forward = engines.inference(tiny(), "cpu")

    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here")

    def wrong(gm, example_inputs):
        return lambda *args: [2 * y for y in gm(*args)]

    fast, note = engines.compiled_inference(forward, x, "cpu", backend=broken)
    assert fast is None and note.startswith("torch.compile failed here") and "no compiler here" in note
    torch._dynamo.reset()  # the failure above is cached with the module's code
    fast, note = engines.compiled_inference(forward, x, "cpu", backend=wrong)
    assert fast is None and "differs from eager by 1.0e+00" in note


def test_agreement_is_relative():
    want = torch.tensor([3.0, 4.0])
    assert engines.agreement(want * 1.01, want) == pytest.approx(0.01)
    assert engines.tolerance("cuda") > engines.tolerance("cpu")


def test_headroom_and_the_model_side_read_either_way():
    assert engines.headroom(3000.0, 1000.0) == 3.0
    with pytest.raises(ValueError, match="positive"):
        engines.headroom(0.0, 1000.0)
    ahead = engines.read_model_side({"eager": 2000.0}, loader=3000.0, train=1000.0, note="skipped here")
    assert "torch.compile not measured: skipped here" in ahead
    assert "Training at 1,000 images/s: a model at most 3.0x faster could still be fed (an upper bound" in ahead
    assert "Inference (eager) at 2,000 images/s: a model at most 1.5x faster could still be fed" in ahead
    assert ahead.endswith("Past that, a faster model gains nothing until the loader keeps up.")
    behind = engines.read_model_side({"eager": 2000.0, "torch.compile": 1000.0}, loader=500.0, train=250.0)
    assert "torch.compile 1,000 (2.00x slower than eager)" in behind and "not measured" not in behind
    assert "Inference (eager) at 2,000 images/s: the loader is already the bottleneck, 4.00x slower than the model" in behind
    assert behind.endswith("gains nothing where the loader cannot keep up.")


def test_the_headroom_is_read_against_the_band_on_a_grid():
    def inference(loader: float, flat: float = 0.25) -> str:  # 0.25: exact in binary, so the edges are testable
        text = engines.read_model_side({"eager": 1000.0}, loader=loader, train=100.0, flat=flat)
        return text.split("Inference (eager) at 1,000 images/s: ")[1].split(". ")[0]

    tie = "about the loader's rate, so a faster model would wait for it"
    assert inference(1000.0) == tie  # a tie
    assert inference(1200.0) == tie  # a win inside the band: never "1.0x faster" or "1.2x" as if it were clear
    assert inference(1250.0) == tie  # at the upper edge: still inside
    assert inference(1260.0).startswith("a model at most 1.3x faster could still be fed")  # just past it
    assert inference(800.0) == tie and inference(1000 / 1.25) == tie  # a loss inside the band, and at its edge
    assert inference(790.0) == "the loader is already the bottleneck, 1.27x slower than the model"  # past it
    assert inference(1010.0, flat=0.0).startswith("a model at most 1.01x faster")  # no band: never "1.0x"
    assert inference(1050.0, flat=0.1) == tie  # the default band of a reference saved without one
    forward = {"eager": 1000.0, "torch.compile": 1100.0}
    assert "torch.compile 1,100 (as fast as eager)" in engines.read_model_side(forward, loader=5000.0, train=100.0,
                                                                                flat=0.25)


def test_tensorrt_is_looked_up_without_importing_it(monkeypatch):
    import importlib.util
    import sys

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert engines.tensorrt_version() is None
    assert "torch_tensorrt" not in sys.modules


def test_tensorrt_is_tried_only_where_it_can_run_and_a_failure_is_one_line(monkeypatch):
    forward, x = engines.inference(tiny(), "cpu"), torch.randn(2, 3, 8, 8)
    monkeypatch.setattr(engines, "tensorrt_version", lambda: None)
    assert engines.try_tensorrt(forward, x, "cpu") == (None, engines.NOT_INSTALLED)
    monkeypatch.setattr(engines, "tensorrt_version", lambda: "2.9")
    assert engines.try_tensorrt(forward, x, "cpu") == (None, engines.NEEDS_CUDA)

    def broken(forward, example):
        raise RuntimeError("unsupported layer\n  at a long traceback")

    monkeypatch.setattr(engines, "tensorrt_engine", broken)
    trt, note = engines.try_tensorrt(forward, x, "cuda")
    assert trt is None and note == "Torch-TensorRT 2.9 failed here (RuntimeError: unsupported layer)"
    monkeypatch.setattr(engines, "tensorrt_engine", lambda forward, example: lambda images: 2 * forward(images))
    trt, note = engines.try_tensorrt(forward, x, "cuda")
    assert trt is None and note.endswith("more than the 2e-02 allowed: not timed")
    monkeypatch.setattr(engines, "tensorrt_engine", lambda forward, example: forward)
    trt, note = engines.try_tensorrt(forward, x, "cuda")
    assert trt is forward and note == "Torch-TensorRT 2.9: engine built, output within 0.0e+00 of eager"
