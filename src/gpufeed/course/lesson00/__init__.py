"""Lesson 00's own helpers: the sentences that read this machine's ceilings (:mod:`.reading`).

Taught in ``notebooks/00_setup.ipynb``.
"""
