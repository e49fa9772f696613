"""Lesson 08's own helpers: the stream hazards played on :mod:`gpufeed.simcuda` (:mod:`.hazards`),
the prefetcher's timed experiment (:mod:`.overlap`) with its arms (:mod:`.feeds`: the model, the
loader and the three feeds) and its profiler traces (:mod:`.traced`), and the sentences that read it
(:mod:`.reading`, this lesson's one module of prose).

Taught in ``notebooks/08_prefetch.ipynb``.
"""
