"""Lesson 07's own helpers: DataLoader sweeps (:mod:`.knobs`), moving batches in workers and
DataParallel (:mod:`.collate`), tensors saved on one device loaded on another (:mod:`.devicefiles`).

Taught in ``notebooks/07_dataloader.ipynb``.
"""
