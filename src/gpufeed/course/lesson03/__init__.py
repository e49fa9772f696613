"""Lesson 03's own helpers: the sentences that read the dtype and transfer-order measurements
(:mod:`.reading`).

Taught in ``notebooks/03_dtypes.ipynb``.
"""
