"""Lesson 10's own helpers: the sentences that read its measurements (:mod:`.reading`). DALI's
pipelines and their torchvision references live in :mod:`gpufeed.measure.dali`, which ``gpufeed
bench`` shares.

Taught in ``notebooks/10_dali.ipynb``.
"""
