"""Lesson 01's own helpers: the sliders over the pipeline simulator (:mod:`.explorer`), the naive
loop and the loop with loading threads timed in turns (:mod:`.loops`), and the sentences that read
what the lesson measured (:mod:`.reading`).

Taught in ``notebooks/01_bottlenecks.ipynb``; the simulator and its timelines are shared
(:mod:`gpufeed.course.simulator`, :mod:`gpufeed.course.timeline`).
"""
