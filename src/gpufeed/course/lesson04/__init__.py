"""Lesson 04's own helpers: what a JPEG loses (:mod:`.quality`: PSNR, SSIM, the quality sweep)
and the same images stored in other formats (:mod:`.formats`).

Taught in ``notebooks/04_jpeg.ipynb``.
"""
