"""Lesson 08's own helpers: the stream hazards played on :mod:`gpufeed.simcuda` (:mod:`.hazards`),
the prefetcher's timed experiment (:mod:`.overlap`), and the sentences that read it
(:mod:`.overlap_prose`, this lesson's one module of prose).

Taught in ``notebooks/08_prefetch.ipynb``.
"""
