"""Lesson 04's own helpers: what a JPEG loses (:mod:`.quality`: PSNR, SSIM, the quality sweep), which
library decodes and where a decode's time goes (:mod:`.decoders`), the same images stored in other
formats (:mod:`.formats`), and the sentences that read them (:mod:`.reading`).

Taught in ``notebooks/04_jpeg.ipynb``.
"""
