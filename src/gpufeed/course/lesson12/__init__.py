"""Lesson 12's own helpers: the scaling-out script (:mod:`.distributed`, run under torchrun), its
launcher (:mod:`.launch`), disjoint shards per rank (:mod:`.shards`), the page cache shared by
ranks (:mod:`.pagecache`), the free ports both ends need (:mod:`.ports`), and ranks forked from
one process that has imported torch already (:mod:`.forked`).

Taught in ``notebooks/12_scaling.ipynb``.
"""
