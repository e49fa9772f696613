"""Lesson 12's own helpers: the scaling-out script (:mod:`.distributed`, run under torchrun), its
launcher (:mod:`.launch`), disjoint shards per rank (:mod:`.shards`), the page cache shared by
ranks (:mod:`.pagecache`), and the free ports both ends need (:mod:`.ports`).

Taught in ``notebooks/12_scaling.ipynb``.
"""
