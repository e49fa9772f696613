"""For the ``cuda``-marked tests: a block in which any host-device synchronisation is an error."""

import contextlib

import torch


@contextlib.contextmanager
def no_host_sync():
    """Everything issued inside must run ahead of the GPU: ``torch.cuda.set_sync_debug_mode("error")``
    turns a blocking copy, ``.item()`` or a synchronize into a RuntimeError."""
    torch.cuda.synchronize()  # the warm-up before it may sync; not counted
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def consume_on_the_gpu(batches) -> int:
    """Uses every batch's images on the current stream (as a model would), returns how many."""
    n = 0
    for images, *_ in batches:
        images.mul_(2)
        n += 1
    return n
