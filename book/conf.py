"""Sphinx configuration of the course site (`make book`; the logic lives in tools/book.py).

Built from the repository root (``sphinx-build -c book . build/book/html``): the README is the home
page, the lessons are ``notebooks/NN_*.ipynb`` executed in site mode through jupyter-cache.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import book  # noqa: E402  (tools/book.py)

project = "gpufeed"
author = "the gpufeed authors"
copyright = "the gpufeed authors (MIT licence; the photos keep their own, see assets/photos/LICENSES.md)"
root_doc = "README"
# Only the README and the generated notebooks are pages; the rest of the checkout is pruned from
# Sphinx's walk (.venv alone holds tens of thousands of files).
include_patterns = ["README.md", "notebooks/[0-9][0-9]_*.ipynb"]
exclude_patterns = [".*", "build", "out", "data", "slides", "src", "tests", "tools", "results", "assets",
                    "wheelhouse", "notebooks/.ipynb_checkpoints"]

extensions = ["myst_nb"]

# Execution: outputs come from the jupyter-cache that `tools/book.py execute` filled (every lesson
# run once, in site mode (BOOK_MODE), on this machine); a lesson missing there is run here. A cell that raises
# fails the build, as under nbmake.
nb_execution_mode = "cache"
nb_execution_cache_path = str(book.cache_dir())
nb_execution_timeout = book.TIMEOUT_S
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_in_temp = False  # each lesson runs in notebooks/, as in JupyterLab and nbmake
nb_merge_streams = True
# No widget JavaScript from a CDN: the sliders need a live kernel (JupyterLab or Colab), and the
# lessons draw each widget's figure once themselves. Widget views show their text instead.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None),
                              ("html", "application/vnd.jupyter.widget-state+json", None)]

myst_heading_anchors = 3  # the README links its own sections (#testing-on-a-gpu-node)
myst_enable_extensions = ["colon_fence"]

html_theme = "sphinx_book_theme"
html_title = "gpufeed: feeding images to the GPU, fast"
html_static_path = [str(ROOT / "book" / "static")]
html_css_files = ["book.css"]
html_theme_options = {
    "repository_url": book.repo_url(),
    "repository_branch": "main",
    "path_to_docs": "",
    "use_repository_button": True,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
}
html_last_updated_fmt = ""  # the build date is the lessons' own header (when they were executed)
html_show_sourcelink = False


def setup(app):
    book.setup(app)
