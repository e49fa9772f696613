"""Lesson 09's own helpers: the sentences that read its measurements (:mod:`.reading`).

Taught in ``notebooks/09_augment.ipynb``.
"""
