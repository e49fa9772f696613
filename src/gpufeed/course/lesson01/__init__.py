"""Lesson 01's own helpers: the sliders over the pipeline simulator (:mod:`.explorer`).

Taught in ``notebooks/01_bottlenecks.ipynb``; the simulator and its timelines are shared
(:mod:`gpufeed.course.simulator`, :mod:`gpufeed.course.timeline`).
"""
