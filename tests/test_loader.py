import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from gpufeed.data.gather import BatchTensorDataset, gather, no_collate
from gpufeed.data.loader import FastLoader
from gpufeed.data.memmap import ImageData
from gpufeed.data.orders import grouped_permutation, permutation


def epoch_order(loader):
    return torch.cat([b[1] if isinstance(b, tuple) else b for b in loader]).tolist()


@pytest.mark.parametrize("group_size", [None, 7])
def test_every_index_once_new_order_each_epoch_same_for_the_same_seed(group_size):
    n = 103
    data = torch.arange(n)
    loader = FastLoader(data, batch_size=10, seed=3, group_size=group_size)
    epochs = [epoch_order(loader) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(n))
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    twin = FastLoader(data, batch_size=10, seed=3, group_size=group_size)
    assert [epoch_order(twin) for _ in range(3)] == epochs
    assert epoch_order(FastLoader(data, batch_size=10, seed=4, group_size=group_size)) != epochs[0]
    twin.set_epoch(1)
    assert epoch_order(twin) == epochs[1]
    twin.set_epoch(0)
    first, second = iter(twin), iter(twin)  # each iter() takes the next epoch at once
    assert torch.cat(list(second)).tolist() == epochs[1] and torch.cat(list(first)).tolist() == epochs[0]
    assert [len(b) for b in loader] == [10] * 10 + [3] and len(loader) == 11


def test_batches_are_the_naive_gather_of_the_index_batches():
    x, y = torch.randn(50, 3, 4), torch.arange(50)
    loader = FastLoader((x, y), batch_size=8, seed=1)
    for idx, (xb, yb) in zip(loader.indices(), loader):
        assert torch.equal(xb, torch.stack([x[i] for i in idx])) and torch.equal(yb, y[idx])


def test_no_shuffle_and_drop_last():
    assert epoch_order(FastLoader(torch.arange(10), batch_size=3, shuffle=False)) == list(range(10))
    loader = FastLoader(torch.arange(10), batch_size=3, drop_last=True)
    assert len(loader) == 3 and [len(b) for b in loader] == [3, 3, 3]


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("shuffle, group_size", [(True, None), (True, 8), (False, None)])
def test_ranks_get_shards_that_cover_the_epoch_padded_to_one_length(world_size, shuffle, group_size):
    """Issue 26, defect 3: as DistributedSampler pads, every rank gets ceil(n / world_size) positions
    of the epoch's order, the last ones wrapping to its start; without padding DDP hangs."""
    n = 101
    for epoch in (0, 1):
        shards = []
        for rank in range(world_size):
            loader = FastLoader(torch.arange(n), 4, shuffle=shuffle, seed=0, rank=rank, world_size=world_size,
                                group_size=group_size)
            loader.set_epoch(epoch)
            shards.append(epoch_order(loader))
        flat = [i for s in shards for i in s]
        whole = FastLoader(torch.arange(n), 4, shuffle=shuffle, seed=0, group_size=group_size)
        whole.set_epoch(epoch)
        order = epoch_order(whole)
        pad = -n % world_size
        assert flat == order + order[:pad]  # the whole order once, then its start again as padding
        assert [len(s) for s in shards] == [-(-n // world_size)] * world_size
        # drop_last: every rank yields the same number of full batches
        counts = [len(list(FastLoader(torch.arange(n), 4, shuffle=shuffle, rank=r, world_size=world_size,
                                      group_size=group_size, drop_last=True))) for r in range(world_size)]
        assert counts == [(n // world_size) // 4] * world_size


@pytest.mark.parametrize("group_size", [None, 5])
def test_64_images_on_3_ranks_in_batches_of_7_give_every_rank_4_batches(group_size):
    """Issue 26, defect 3, the case that hung: unpadded, ranks yielded 4, 3 and 3 batches."""
    loaders = [FastLoader(torch.arange(64), 7, rank=r, world_size=3, group_size=group_size) for r in range(3)]
    got = [[b.tolist() for b in loader] for loader in loaders]
    assert [len(loader) for loader in loaders] == [len(g) for g in got] == [4, 4, 4]
    assert sorted({i for g in got for b in g for i in b}) == list(range(64))
    assert sum(len(b) for g in got for b in g) == 66  # two images seen twice, as DistributedSampler does


def test_more_ranks_than_samples_still_give_every_rank_a_batch():
    got = [[b.tolist() for b in FastLoader(torch.arange(2), 4, rank=r, world_size=5, seed=3)] for r in range(5)]
    assert all(len(g) == 1 and len(g[0]) == 1 for g in got) and {g[0][0] for g in got} == {0, 1}


def test_grouped_shuffle_keeps_neighbours_together():
    n, g = 1000, 50
    p = grouped_permutation(n, g, seed=0)
    assert sorted(p.tolist()) == list(range(n))
    blocks = (p // g).tolist()
    assert all(len(set(blocks[i:i + g])) == 1 for i in range(0, n, g))  # each run of g is one block
    assert blocks[::g] != sorted(blocks[::g])  # ... in a shuffled block order
    assert not torch.equal(permutation(n, 0, 0), permutation(n, 0, 1))


def test_sorted_indices_hold_the_same_samples():
    plain = FastLoader(torch.arange(40), batch_size=8, seed=5)
    ordered = FastLoader(torch.arange(40), batch_size=8, seed=5, sort_indices=True)
    for a, b in zip(plain, ordered):
        assert torch.equal(a.sort().values, b)


def test_reused_buffers_give_the_same_batches_and_are_reused():
    x = torch.randn(30, 5)
    fresh = [b.clone() for b in FastLoader(x, 4, seed=2)]
    reuse = FastLoader(x, 4, seed=2, reuse_buffers=2)
    ptrs = []
    for k, b in enumerate(reuse):
        assert torch.equal(b, fresh[k])
        ptrs.append(b.data_ptr())
    assert len(set(ptrs)) == 2  # two buffers, in turn


def test_two_live_iterators_keep_their_own_buffers():
    x = torch.arange(40).view(20, 2)
    want = [b.clone() for b in FastLoader(x, 4, seed=3, reuse_buffers=2)]
    loader = FastLoader(x, 4, seed=3, reuse_buffers=2)
    loader.set_epoch(0)
    a = iter(loader)
    loader.set_epoch(0)
    b = iter(loader)
    for wa in want:  # interleaved: each iterator's batch must survive the other's next batch
        xa = next(a)
        xb = next(b)
        assert torch.equal(xa, wa) and torch.equal(xb, wa) and xa.data_ptr() != xb.data_ptr()


def test_without_reuse_no_batch_aliases_another():
    x = torch.arange(20)
    for kwargs in ({}, {"pin_memory": False}):
        got = list(FastLoader(x, 3, **kwargs))
        assert len({b.data_ptr() for b in got}) == len(got)


def test_all_kinds_of_data(tmp_path):
    n = 20
    x, y = torch.randn(n, 2, 3), torch.arange(n)
    idx = torch.tensor([5, 0, 19])
    assert torch.equal(gather(x, idx), x[idx])
    assert torch.equal(gather({"x": x, "y": y}, idx)["y"], y[idx])
    td = gather(TensorDict({"x": x, "y": y}, batch_size=[n]), idx)
    assert isinstance(td, TensorDict) and td.batch_size == (3,) and torch.equal(td["x"], x[idx])
    images = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8)
    mm = ImageData(images=images, targets=y, batch_size=[n]).memmap(prefix=tmp_path / "td")
    batch = gather(mm, idx)
    assert isinstance(batch, ImageData) and batch.batch_size == (3,)
    assert torch.equal(batch.images, images[idx]) and torch.equal(batch.targets, y[idx])
    arr = np.memmap(tmp_path / "a.bin", dtype=np.float32, mode="w+", shape=(n, 4))
    arr[:] = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    arr.flush()
    ro = np.memmap(tmp_path / "a.bin", dtype=np.float32, mode="r", shape=(n, 4))
    assert torch.equal(gather(ro, idx), torch.from_numpy(np.array(ro[idx.numpy()])))
    for b in FastLoader(mm, batch_size=6, seed=0):
        assert torch.equal(b.images, images[b.targets])  # each image stays with its label


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be"),
    ({"batch_size": 2, "rank": 2, "world_size": 2}, "0 <= rank < world_size"),
    ({"batch_size": 2, "group_size": 0}, "group_size must be"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FastLoader(torch.arange(4), **kwargs)


def test_cuda_without_a_gpu_is_refused_at_once():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="torch sees no GPU"):
        FastLoader(torch.arange(4), 2, device="cuda")


def test_bad_data():
    with pytest.raises(ValueError, match="same length"):
        FastLoader((torch.arange(4), torch.arange(5)), 2)
    with pytest.raises(TypeError, match="field '0' must be a tensor"):
        FastLoader(([1, 2, 3],), 2)


def test_batch_dataset_through_a_dataloader_matches_per_sample():
    x, y = torch.randn(50, 3), torch.arange(50)
    naive = list(DataLoader(TensorDataset(x, y), batch_size=8))
    ds = BatchTensorDataset(x, y)
    assert torch.equal(ds[3][0], x[3]) and ds[3][1] == y[3]
    via_getitems = list(DataLoader(ds, batch_size=8, collate_fn=no_collate))
    via_sampler = list(DataLoader(ds, sampler=BatchSampler(SequentialSampler(ds), 8, drop_last=False), batch_size=None))
    for (a, ya), (b, yb), (c, yc) in zip(naive, via_getitems, via_sampler):
        assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(ya, yb) and torch.equal(ya, yc)
    shuffled = DataLoader(ds, sampler=BatchSampler(RandomSampler(ds), 8, drop_last=False), batch_size=None)
    assert sorted(torch.cat([b[1] for b in shuffled]).tolist()) == list(range(50))


def test_cuda_batches_arrive_whole_and_right(on_cuda):
    x, y = torch.randn(100, 3, 8, 8), torch.arange(100)
    for reuse in (0, 2):
        loader = FastLoader((x, y), batch_size=16, seed=0, device="cuda", reuse_buffers=reuse)
        for xb, yb in loader:
            assert xb.is_cuda and torch.equal(xb.cpu(), x[yb.cpu()])


def test_cuda_image_rows_take_the_pieces_path_into_pinned_memory_without_a_sync(on_cuda):
    """Rows of 3x128x128 go through take_rows' pieces into pinned buffers (fresh, and a ring with a
    short last batch), then to the GPU: the same values, and no host-device sync while iterating."""
    x, y = torch.randint(0, 256, (40, 3, 128, 128), dtype=torch.uint8), torch.arange(40)
    for reuse in (0, 2):
        loader = FastLoader((x, y), batch_size=16, seed=0, device="cuda", reuse_buffers=reuse)
        torch.cuda.set_sync_debug_mode("error" if reuse == 0 else "default")  # a ring waits on its events by design
        try:
            got = list(loader)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        assert [len(yb) for _, yb in got] == [16, 16, 8]
        for xb, yb in got:  # on the device each batch is new memory, ring or not: none aliases another
            assert xb.is_cuda and torch.equal(xb.cpu(), x[yb.cpu()])


def test_cuda_copies_go_to_the_loaders_device_from_a_producer_thread(on_cuda):
    from gpufeed.data.prefetch import ThreadPrefetcher

    last = torch.device("cuda", torch.cuda.device_count() - 1)
    x, y = torch.randn(64, 3, 8, 8), torch.arange(64)
    got = list(ThreadPrefetcher(FastLoader((x, y), batch_size=16, seed=0, device=last, reuse_buffers=2), depth=2))
    torch.cuda.synchronize(last)
    for xb, yb in got:
        assert xb.device == last and torch.equal(xb.cpu(), x[yb.cpu()])


@pytest.mark.parametrize("shape,dtype", [((6, 3, 240, 240), torch.uint8), ((5, 3, 128, 128), torch.float32),
                                         ((4, 65537), torch.uint8), ((7, 3, 8, 8), torch.uint8), ((9,), torch.int64)])
@pytest.mark.parametrize("threads", [1, 2])
def test_take_rows_is_index_select(shape, dtype, threads):
    from gpufeed.data.gather import _pieces, take_rows

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randint(0, 100, shape).to(dtype)
        for idx in (torch.tensor([3, 0, 3, 1]), torch.tensor([], dtype=torch.int64), torch.tensor([2], dtype=torch.int32)):
            want = torch.index_select(x, 0, idx)
            assert torch.equal(take_rows(x, idx), want)
            out = torch.full((len(idx) + 2, *shape[1:]), 7).to(dtype)
            assert torch.equal(take_rows(x, idx, out=out[:len(idx)]), want)  # into a slice of a larger buffer
            assert torch.equal(out[len(idx):], torch.full_like(out[len(idx):], 7))  # and not one byte past it
        with pytest.raises(IndexError):
            take_rows(x, torch.tensor([0, shape[0]]))
        with pytest.raises(IndexError):
            take_rows(x, torch.tensor([-1]))
        with pytest.raises(RuntimeError, match="int32 or int64"):  # a mask is not an index: refused as index_select does
            take_rows(x, torch.zeros(shape[0], dtype=torch.bool))
    finally:
        torch.set_num_threads(old)
    row = math.prod(shape[1:])
    k = _pieces(row)
    assert row % k == 0 and (k == 1 or row // k < 32768)
    assert _pieces(65537) == 1  # a prime: no equal pieces, index_select as it is


def test_take_rows_on_a_strided_view_and_a_wrong_out_falls_back_to_index_select():
    from gpufeed.data.gather import take_rows

    x = torch.randint(0, 255, (6, 3, 200, 200), dtype=torch.uint8)
    idx = torch.tensor([5, 1])
    assert torch.equal(take_rows(x[:, :, ::2], idx), x[idx][:, :, ::2])
    out = torch.empty((2, 3, 200, 200), dtype=torch.uint8).transpose(2, 3)
    assert torch.equal(take_rows(x, idx, out=out), x[idx])
