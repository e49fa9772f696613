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
    assert "Training at 1,000 images/s: a model up to 3.0x faster would still be fed." in ahead
    assert "Inference (eager) at 2,000 images/s: a model up to 1.5x faster would still be fed." in ahead
    behind = engines.read_model_side({"eager": 2000.0, "torch.compile": 1000.0}, loader=500.0, train=250.0)
    assert "torch.compile 1,000 (2.00x slower than eager)" in behind and "not measured" not in behind
    assert "Inference (eager) at 2,000 images/s: the loader is already the bottleneck, 4.0x slower" in behind


def test_tensorrt_is_looked_up_without_importing_it(monkeypatch):
    import importlib.util
    import sys

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert engines.tensorrt_version() is None
    assert "torch_tensorrt" not in sys.modules
