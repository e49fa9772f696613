"""Lesson 11's own helpers: the ladder of techniques (:mod:`.ladder`), loader efficiency
(:mod:`.efficiency`), the sentences that read the training runs (:mod:`.reading`), and the model's
side: eager, ``torch.compile``, TensorRT (:mod:`.engines`).

Taught in ``notebooks/11_together.ipynb``.
"""
