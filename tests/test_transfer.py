import pytest
import torch

from gpufeed.course import transfer


def test_batch_bytes_by_dtype():
    assert transfer.batch_bytes(8, (384, 384), torch.uint8) == 8 * 3 * 384 * 384
    for dtype, k in ((torch.float16, 2), (torch.float32, 4)):
        assert transfer.batch_bytes(64, (1280, 960), dtype) == k * 64 * 3 * 960 * 1280
    table = transfer.wire_table()
    assert len(table.splitlines()) == 1 + len(transfer.SIZES) * len(transfer.BATCHES)
    assert table.splitlines()[-1].split() == ["1280x960", "64", "236", "472", "944"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_every_order_gives_bit_identical_tensors_on_cpu(dtype):
    x = transfer.random_batch(3, (17, 9))
    expected = x.to(dtype)
    for v in transfer.order_variants(dtype):
        out = v.fn(x, "cpu")
        assert out.dtype == dtype and out.device.type == "cpu", v.name
        assert torch.equal(out, expected), v.name
    # every uint8 value is exact in these dtypes: the conversion loses nothing
    assert torch.equal(expected.to(torch.int16), x.to(torch.int16))


def test_variant_names_read_as_code_and_the_baseline_converts_on_the_host():
    names = [v.name for v in transfer.order_variants()]
    assert names[:3] == ["x.half().to(dev)", "x.to(dev).half()", "x.to(dev, float16)"]
    assert transfer.order_variants()[0].where == "host"
    assert sum(v.pinned for v in transfer.order_variants()) == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_every_order_gives_bit_identical_tensors_on_cuda(dtype, on_cuda):
    x = transfer.random_batch(3, (17, 9))
    expected = x.to(dtype)
    for v in transfer.order_variants(dtype):
        src = x.pin_memory() if v.pinned else x
        out = v.fn(src, "cuda")
        torch.cuda.synchronize()
        assert out.device.type == "cuda" and torch.equal(out.cpu(), expected), v.name


def test_sweep_records_every_case_and_plots(tmp_path):
    variants = transfer.conversion_variants()
    ms = transfer.sweep(variants, "cpu", sizes=[(16, 8), (8, 8)], batches=[2, 4], repeats=2, warmup=0)
    assert len(ms) == 2 * 2 * len(variants)
    assert {(m.params["size"], m.params["batch"]) for m in ms} == {("16x8", 2), ("16x8", 4), ("8x8", 2), ("8x8", 4)}
    first = ms[0]
    assert first.items == 2 and first.nbytes == 2 * 3 * 8 * 16 and first.params["device"] == "cpu"
    assert {len(m.samples) for m in ms} == {2}  # the variants of a case in turns: one sample each per round
    fig, axes = transfer.plot_sweep(ms, baseline=variants[0].name, machine={"cpu": "test", "cores": 1})
    assert [ax.get_title() for ax in axes] == ["16x8", "8x8"]
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert labels[0] == f"{variants[0].name} (1.00x)" and len(labels) == len(variants)
    assert axes[0].get_ylabel() == "time per batch (ms)"
