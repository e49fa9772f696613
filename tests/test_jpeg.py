import pytest
import torch

from gpufeed.data import jpeg
from gpufeed.measure.synth import SynthSpec, encode_jpeg, render


@pytest.fixture(scope="module")
def data():
    return encode_jpeg(render(SynthSpec(n=1, width=96, height=64), 0), quality=92)


def test_every_available_decoder_agrees_with_pillow(data):
    ref = jpeg.decode_pil(data)
    assert ref.shape == (3, 64, 96) and ref.dtype == torch.uint8
    for name, decode in jpeg.available_decoders().items():
        out = decode(data)
        assert out.shape == ref.shape and out.dtype == torch.uint8, name
        # libjpeg-turbo builds may differ in IDCT/upsampling rounding: a grey level or two, rarely more
        assert (out.float() - ref.float()).abs().mean() < 1.5, name


def test_decode_jpeg_prefers_the_current_api(data):
    out = jpeg.decode_jpeg(data)
    assert out.shape == (3, 64, 96)


def test_turbo_check_is_a_bool_or_unknown():
    assert jpeg.pillow_uses_turbo() in (True, False, None)


def test_torchcodec_missing_gives_a_hint(data, monkeypatch):
    monkeypatch.setattr(jpeg, "_torchcodec_decode", lambda: None)
    with pytest.raises(ImportError, match="pip install torchcodec"):
        jpeg.decode_torchcodec(data)
    assert jpeg.decode_jpeg(data).shape == (3, 64, 96)  # falls back to torchvision


def test_decode_batch_equals_one_by_one(data):
    other = encode_jpeg(render(SynthSpec(n=2, width=96, height=64), 1), quality=60)
    out = jpeg.decode_batch([data, other])
    assert len(out) == 2
    assert torch.equal(out[0], jpeg.decode_torchvision(data)) and torch.equal(out[1], jpeg.decode_torchvision(other))
    with pytest.raises(ValueError, match="at least one"):
        jpeg.decode_batch([])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where CUDA is absent")
def test_decode_batch_on_cuda_without_a_gpu_says_so(data):
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        jpeg.decode_batch([data], device="cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_decode_batch_on_cuda_is_close_to_the_cpu(data):
    out = jpeg.decode_batch([data, data], device="cuda")
    assert all(t.device.type == "cuda" and t.shape == (3, 64, 96) for t in out)
    # nvJPEG's IDCT and upsampling round differently from libjpeg-turbo: a grey level or two
    assert (out[0].cpu().float() - jpeg.decode_pil(data).float()).abs().mean() < 2.0
