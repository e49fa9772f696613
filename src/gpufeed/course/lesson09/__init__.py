"""Lesson 09's own helpers: the sentences that read its measurements (:mod:`.augment_prose`).

Taught in ``notebooks/09_augment.ipynb``.
"""
