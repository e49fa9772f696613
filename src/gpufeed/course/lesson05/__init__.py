"""Lesson 05's own helpers: the sentences that read its measurements (:mod:`.reading`), each from the
verdict of two arms timed in turns.

Taught in ``notebooks/05_memmap.ipynb``.
"""
