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


QUIET = [1.0, 1.01, 0.99, 1.005, 0.995]  # about 1% of spread: decided
NOISY = [1.0, 1.6, 0.6, 1.3, 0.75]  # wide: a win or loss inside it cannot be told


def at(rate, base=QUIET):  # images/s samples around `rate`
    return [rate * x for x in base]


def test_headroom_and_the_model_side_read_either_way():
    assert engines.headroom(3000.0, 1000.0) == 3.0
    with pytest.raises(ValueError, match="positive"):
        engines.headroom(0.0, 1000.0)
    ahead = engines.read_model_side({"eager": at(2000)}, loader=at(3000), train=at(1000), note="skipped here")
    assert "torch.compile not measured: skipped here" in ahead
    assert "Training at 1,000 images/s: a model up to 3.0x faster (" in ahead and "(an upper bound" in ahead
    assert "Inference (eager) at 2,000 images/s: a model up to 1.5x faster" in ahead
    assert ahead.endswith("Past that, a faster model gains nothing until the loader keeps up.")
    behind = engines.read_model_side({"eager": at(2000), "torch.compile": at(1000)}, loader=at(500), train=at(250))
    assert "torch.compile 1,000, 2.00x slower than eager (" in behind and "not measured" not in behind
    assert "Inference (eager) at 2,000 images/s: the loader is already the bottleneck, 4.00x slower than the model" in behind
    assert behind.endswith("gains nothing where the loader cannot keep up.")


@pytest.mark.parametrize("loader, start", [
    (at(1000), "the loader ran as fast as the model (within"),                       # a tie
    (at(1500), "a model up to 1.5x faster ("),                                       # a win
    (at(500), "the loader is already the bottleneck, 2.00x slower than the model"),  # a loss
    (at(1100, NOISY), "the loader alone was not told apart from the model by this run ("),  # a win inside the spread
    (at(3000)[:3], "the loader alone was not told apart from the model by this run (3 samples per arm)"),  # too few
])
def test_the_headroom_is_a_verdict_on_a_grid(loader, start):
    text = engines.read_model_side({"eager": at(1000)}, loader=loader, train=at(100))
    inference = text.split("Inference (eager) at 1,000 images/s: ")[1]
    assert inference.startswith(start)
    assert ("This run cannot tell" in text) == ("not told apart" in start)  # what would tell, once


def test_the_headroom_threshold_between_the_same_and_cannot_tell():
    edge = [1.0, 1.06, 0.94, 1.03, 0.97]  # about 6% either way around a tie
    text = engines.read_model_side({"eager": at(1000)}, loader=at(1000, edge), train=at(100))
    assert "the loader ran as fast as the model (within" in text  # inside the 10% a tie may take
    wide = [1.0, 1.2, 0.8, 1.15, 0.85]
    assert "not told apart" in engines.read_model_side({"eager": at(1000)}, loader=at(1000, wide), train=at(100))


def test_a_compiler_is_read_against_eager_in_turns():
    forward = {"eager": at(1000), "torch.compile": at(1000, list(reversed(QUIET)))}
    assert "torch.compile 1,000, as fast as eager (within" in engines.read_model_side(forward, loader=at(5000), train=at(100))
    forward = {"eager": at(1000), "torch.compile": at(1100, NOISY)}
    assert "torch.compile 1,100, not told apart from eager by this run" in engines.read_model_side(
        forward, loader=at(5000), train=at(100))


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
