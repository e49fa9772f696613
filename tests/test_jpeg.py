import pytest
import torch

from gpufeed import jpeg
from gpufeed.synth import SynthSpec, encode_jpeg, render


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
