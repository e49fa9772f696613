"""Lesson 02's own helpers: a new model's first training step on new image sizes
(:mod:`.firstcall`), and the sentences that read what the lesson timed, each from a verdict
(:mod:`.reading`).

Taught in ``notebooks/02_profiling.ipynb``; the trace reading is shared (:mod:`gpufeed.course.trace`).
"""
