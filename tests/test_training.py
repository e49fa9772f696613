import pytest
import torch
from torch import nn

from gpufeed.course import training
from gpufeed.data.transforms import normalize


def test_normalize_in_the_model_matches_normalizing_on_the_host():
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    mean, std = training.IMAGENET_MEAN, training.IMAGENET_STD
    torch.testing.assert_close(training.Normalize(mean, std)(x), normalize(x, torch.float32, mean, std), rtol=0, atol=0)
    model = training.resnet18_with_normalize(num_classes=4).eval()
    with torch.no_grad():
        inside = model(x)
        outside = model[1](normalize(x, torch.float32, mean, std))
    torch.testing.assert_close(inside, outside)
    assert inside.shape == (2, 4)


def test_normalize_takes_float_input_too_and_moves_with_the_model():
    x = torch.randint(0, 256, (1, 3, 4, 4), dtype=torch.uint8)
    norm = training.Normalize()
    assert torch.equal(norm(x), norm(x.half())) and torch.equal(norm(x), norm(x.float()))
    assert {n for n, _ in norm.named_buffers()} == {"scale", "shift"}
    assert "mean=(0.485" in repr(norm)


def test_normalize_rejects_bad_statistics():
    with pytest.raises(ValueError, match="one value per channel"):
        training.Normalize((0.5, 0.5), (0.2,))
    with pytest.raises(ValueError, match="positive"):
        training.Normalize((0.5,), (0.0,))


def test_send_gives_the_same_values_whatever_the_wire():
    xb = torch.randint(0, 256, (2, 3, 5, 5), dtype=torch.uint8)
    norm = training.Normalize()
    outs = [norm(training.send(xb, w, "cpu")) for w in training.WIRES]
    assert training.send(xb, "uint8", "cpu").dtype == torch.uint8
    assert training.send(xb, "float16", "cpu").dtype == torch.float16
    assert all(torch.equal(outs[0], o) for o in outs)
    with pytest.raises(ValueError, match="wire must be one of"):
        training.send(xb, "int8", "cpu")


def test_autocast_dtype_per_device():
    assert training.autocast_dtype("cpu") == torch.bfloat16
    assert training.autocast_dtype("cuda") == torch.float16


@pytest.mark.parametrize(("amp", "wire", "images"), [(False, "float16", 4), (True, "uint8", 2)])
def test_train_epoch_runs_and_records_its_case(amp, wire, images):
    m = training.train_epoch(batch=2, size=(32, 32), wire=wire, device="cpu", epoch_images=images, amp=amp,
                             repeats=1, warmup=0)
    steps = images // 2
    assert m.params == {"size": "32x32", "batch": 2, "wire": wire, "amp": amp, "steps": steps, "device": "cpu"}
    assert m.items == images and len(m.samples) == 1 and m.median > 0 and m.name == f"{wire} on the wire"


def test_a_training_step_changes_the_weights():
    model = training.resnet18_with_normalize(num_classes=3)
    before = model[1].fc.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = training.send(torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8), "uint8", "cpu")
    nn.functional.cross_entropy(model(x), torch.tensor([0, 1])).backward()
    opt.step()
    assert not torch.equal(before, model[1].fc.weight)


def test_the_memory_guard_reads_free_device_memory():
    asked = []

    def t4(device):  # a fake torch.cuda.mem_get_info: Colab's T4, 15 GB free
        asked.append(device)
        return 15 << 30, 16 << 30

    assert training.fits(64, (1280, 960), "cuda", mem_get_info=t4) is False
    assert training.fits(8, (384, 384), "cuda", mem_get_info=t4) is True
    assert asked == [torch.device("cuda")] * 2
    big = lambda d: (140 << 30, 141 << 30)  # noqa: E731
    assert training.fits(64, (1280, 960), "cuda:0", mem_get_info=big) is True
    assert training.fits(10**6, (1280, 960), "cpu", mem_get_info=t4) is True and len(asked) == 2  # CPU: not asked
    assert training.train_bytes(16, (640, 480)) < training.train_bytes(32, (640, 480))


def test_calibrate_is_none_off_cuda_and_fits_takes_its_figure():
    assert training.calibrate("cpu") is None
    free = lambda d: (15 << 30, 16 << 30)  # noqa: E731  a 16 GB GPU with 15 GB free
    assert not training.fits(64, (1280, 960), "cuda", mem_get_info=free)  # the fixed estimate: ~48 GB
    assert training.fits(64, (1280, 960), "cuda", mem_get_info=free, per_pixel=100.0)  # ~8 GB by a smaller figure


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: max_memory_allocated needs one")
def test_calibrate_measures_bytes_per_input_pixel_on_a_gpu():
    per_pixel = training.calibrate("cuda", size=(64, 64))
    assert 10 < per_pixel < 5000  # activations saved for backward: hundreds of bytes per input pixel
