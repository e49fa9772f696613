
import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from gpufeed.data.augment import (
    TOLERANCE,
    augment,
    augment_one,
    color_jitter,
    cpu_transform,
    crop_boxes,
    crop_resize,
    draw_params,
    finish,
    resample_weights,
)
from gpufeed.data.transforms import flip

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
JITTER = {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4}


def batch(n=8, h=40, w=56, seed=0):
    return torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def params(n, image_size, size, seed=0, **kw):
    return draw_params(n, image_size, size, generator=torch.Generator().manual_seed(seed), **{**JITTER, **kw})


def test_parameters_differ_across_the_batch_and_repeat_with_the_seed():
    p = params(64, (96, 128), (32, 32))
    assert len({tuple(b) for b in p.boxes.tolist()}) == 64  # 64 different crops
    assert 0 < int(p.flip.sum()) < 64  # some flipped, some not
    for f in (p.brightness, p.contrast, p.saturation):
        assert len(set(f.tolist())) == 64 and f.min() >= 0.6 and f.max() <= 1.4
    again, other = params(64, (96, 128), (32, 32)), params(64, (96, 128), (32, 32), seed=1)
    assert torch.equal(again.boxes, p.boxes) and torch.equal(again.flip, p.flip)
    assert torch.equal(again.saturation, p.saturation)
    assert not torch.equal(other.boxes, p.boxes)


def test_crop_boxes_follow_random_resized_crop_rules():
    h, w = 60, 90
    boxes = crop_boxes(2000, h, w, scale=(0.2, 0.8), ratio=(0.5, 2.0), generator=torch.Generator().manual_seed(0))
    top, left, bh, bw = boxes.T
    assert (top >= 0).all() and (left >= 0).all() and (top + bh <= h).all() and (left + bw <= w).all()
    area = (bh * bw).float() / (h * w)
    assert area.min() > 0.15 and area.max() < 0.85  # the scale range, give or take rounding
    ratio = bw.float() / bh.float()
    assert ratio.min() > 0.45 and ratio.max() < 2.2
    assert len(set(top.tolist())) > 20 and len(set(left.tolist())) > 20  # positions spread over the image
    # A scale that can never fit: every box is torchvision's fallback, the largest centred crop in `ratio`.
    fallback = crop_boxes(5, 40, 100, scale=(2.0, 3.0), ratio=(0.75, 4 / 3))
    assert fallback.tolist() == [[0, 23, 40, 53]] * 5


def test_resample_weights_rows_sum_to_one_and_stay_in_the_crop():
    w = resample_weights(torch.tensor([3, 0]), torch.tensor([10, 7]), in_size=16, out_size=5)
    assert torch.allclose(w.sum(-1), torch.ones(2, 5))
    assert (w[0, :, :3] == 0).all() and (w[0, :, 13:] == 0).all() and (w[1, :, 7:] == 0).all()
    same = resample_weights(torch.tensor([2]), torch.tensor([6]), in_size=8, out_size=6)
    assert torch.equal(same[0], torch.eye(8)[2:8])  # a crop already at the output size is copied


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [((40, 56), (24, 24)), ((33, 21), (48, 40)), ((64, 64), (64, 64))])
def test_each_output_equals_the_per_sample_torchvision_reference(device, shape):
    (h, w), size = shape
    x, p = batch(8, h, w, seed=h), params(8, (h, w), size, scale=(0.02, 1.0))  # small crops are upscaled
    out = augment(x.to(device), p.to(device))
    assert out.shape == (8, 3, *size) and out.dtype == torch.float32 and out.device.type == device
    for i in range(8):
        ref = augment_one(x[i], p.sample(i))  # torchvision v2.functional, one image, on the CPU
        assert torch.allclose(out[i].cpu(), ref, atol=TOLERANCE, rtol=0), i


def test_crop_resize_matches_torchvision_resized_crop_on_uint8():
    x, p = batch(8), params(8, (40, 56), (24, 32))
    small = crop_resize(x, p.boxes, p.size, out_dtype=torch.uint8)
    assert small.dtype == torch.uint8
    for i in range(8):
        top, left, h, w = p.boxes[i].tolist()
        ref = F.resized_crop(x[i], top, left, h, w, [24, 32], antialias=True)  # torch's own uint8 kernel
        assert (small[i].int() - ref.int()).abs().max() <= 1


def test_flip_by_mask_and_the_flip_folded_into_the_resize():
    x, p = batch(8), params(8, (40, 56), (24, 24))
    flipped = flip(x, p.flip)
    for i in range(8):
        assert torch.equal(flipped[i], F.horizontal_flip(x[i]) if p.flip[i] else x[i])
    folded = crop_resize(x, p.boxes, p.size, flip=p.flip)
    assert torch.equal(folded, flip(crop_resize(x, p.boxes, p.size), p.flip))


def test_color_jitter_uses_each_samples_own_factor():
    x = torch.rand(4, 3, 8, 8)
    f = torch.tensor([0.5, 1.0, 1.3, 0.9])
    for name, fn in (("brightness", F.adjust_brightness), ("contrast", F.adjust_contrast),
                     ("saturation", F.adjust_saturation)):
        out = color_jitter(x, **{name: f})
        for i in range(4):
            assert torch.allclose(out[i], fn(x[i], f[i].item()), atol=1e-6), (name, i)
    assert torch.equal(color_jitter(x), x)  # no factors: unchanged
    assert torch.allclose(finish(x * 255), F.normalize(x, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]), atol=1e-5)


def test_a_random_v2_transform_on_a_batch_draws_once_for_the_whole_batch():
    x = batch(32)
    torch.manual_seed(0)
    flipped = [torch.equal(a, b) for a, b in zip(v2.RandomHorizontalFlip(p=0.5)(x), x.flip(-1))]
    assert all(flipped) or not any(flipped)  # the trap lesson 09 shows
    p = params(32, (40, 56), (40, 56), scale=(1.0, 1.0), ratio=(56 / 40, 56 / 40))
    ours = [torch.equal(a, b) for a, b in zip(crop_resize(x, p.boxes, p.size, flip=p.flip, out_dtype=torch.uint8),
                                              x.flip(-1))]
    assert ours == p.flip.tolist() and 0 < sum(ours) < 32


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="must be positive"):
        draw_params(0, (8, 8), (4, 4))
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        crop_resize(torch.zeros(3, 8, 8), torch.zeros(1, 4, dtype=torch.long), (4, 4))


def test_uint8_in_workers_then_finish_on_the_device_equals_the_usual_pipeline():
    image = torch.randint(0, 256, (3, 40, 48), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(5)
    usual = cpu_transform((24, 24), **JITTER)(image)
    torch.manual_seed(5)  # the same random draws, stopping at uint8
    late = cpu_transform((24, 24), **JITTER, to_float=False)(image)
    assert late.dtype == torch.uint8
    assert torch.allclose(finish(late[None])[0], usual, atol=1e-6)
