"""gpufeed.data: the library, the part you copy into your own training.

Each module holds one piece; none needs the lessons to be used safely:

* :mod:`~gpufeed.data.folder`: a folder of images (ImageFolder layout) as a Dataset, with the one
  resize policy; :mod:`~gpufeed.data.jpeg`: the JPEG decoders.
* :mod:`~gpufeed.data.memmap`: the memmap format (atomic build, load); :mod:`~gpufeed.data.staging`:
  folders that appear all at once or not at all; :mod:`~gpufeed.data.arrays`: the same arrays with
  NumPy alone; :mod:`~gpufeed.data.manifest`: the format's names and manifest, which both use.
* :mod:`~gpufeed.data.loader`: batched loading (one gather per batch), seeded, sharded;
  :mod:`~gpufeed.data.settings`: a loader's settings, each checked once;
  :mod:`~gpufeed.data.orders`: the epochs' sample orders (seeded, full or grouped shuffles);
  :mod:`~gpufeed.data.gather`: rows of every field in one ``index_select`` each, and a dataset a
  DataLoader fetches a batch at a time; :mod:`~gpufeed.data.streams`: a loader's side stream per
  device and its ring of buffers, each refilled once the copies out of it are done.
* :mod:`~gpufeed.data.prefetch`: prefetchers (a CUDA side stream; a thread on the CPU), both run
  on :mod:`~gpufeed.data.producer`'s thread (a bounded queue, errors carried, a quick close).
* :mod:`~gpufeed.data.movers`: moving nested batches to a device.
* :mod:`~gpufeed.data.progress_bar`: the one rule for whether a progress bar is drawn (someone
  watches: a terminal or a notebook; not in quick mode, under pytest or CI).
* :mod:`~gpufeed.data.transforms`: the transforms, each once: normalise, the ImageNet constants,
  per-sample crop + flip; :mod:`~gpufeed.data.cpu_crops`: the CPU's one pass from stored bytes to
  normalised crops, on a pool of threads; :mod:`~gpufeed.data.device_augment`:
  :class:`~gpufeed.data.device_augment.DeviceAugment`, both on a whole batch where it lives.
* :mod:`~gpufeed.data.augment`: per-sample augmentation of whole batches, on any device;
  :mod:`~gpufeed.data.resized`: its RandomResizedCrop for the front door (CPU and device paths).
* :mod:`~gpufeed.data.image_loader`: the front door, :class:`~gpufeed.data.ImageLoader` (its
  settings, built once) and its one pass (``ImageLoaderIterator``): a memmap folder to shuffled,
  augmented, prefetched batches on the device, for your own training loop;
  :mod:`~gpufeed.data.buffers`: the output buffers its CPU path reuses once nothing holds them.

It imports nothing from :mod:`gpufeed.measure` or :mod:`gpufeed.course`, and no plotting library
(``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

import importlib

_MODULES = {'arrays', 'augment', 'buffers', 'cpu_crops', 'device_augment', 'folder', 'gather',
            'image_loader', 'jpeg', 'loader', 'manifest', 'memmap', 'movers', 'orders', 'prefetch',
            'producer', 'progress_bar', 'resized', 'settings', 'staging', 'streams', 'transforms'}

__all__ = sorted(_MODULES | {"ImageLoader"})


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "ImageLoader":  # lazily: importing gpufeed.data stays cheap
        return importlib.import_module(f"{__name__}.image_loader").ImageLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
