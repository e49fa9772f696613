"""Lesson 06's own helpers: a dataset larger than the memory read in two orders
(:mod:`.outofcore`) and what shuffling in blocks does to a batch's classes (:mod:`.shuffles`).

Taught in ``notebooks/06_batched.ipynb``.
"""
