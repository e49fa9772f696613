# The course's commands. Each one installs what it needs first (uv, then .venv from uv.lock).
#   make lab     JupyterLab on notebooks/ (LAB_ARGS=--no-browser to run headless)
#   make test    lint, unit tests, doctests, notebook checks, every notebook in quick mode, on every core
#   make bench   this machine's ceilings: JSON + plots under the results folder
#   make test-oldest  the unit tests, doctests and quick notebooks with the oldest torch pyproject allows (every core)
#   make test-gpu  one GPU slot in GPU_BUDGET_S seconds (460, make node-env included): preflight, the cuda
#                  tests, the same under the CUDA Stream Sanitizer, every notebook in quick mode, then the
#                  full-mode references that fit (GPU_PLAN=references: the references right after the cuda
#                  tests); run.json names each step, test, notebook and reference with its status and the
#                  plan; offline with the wheelhouse (tools/gpurun/)
#   make wheelhouse  (with internet) the wheels an offline GPU node lacks, into wheelhouse/
#   make notebooks  regenerate notebooks/*.ipynb from their .py sources
#   make book    the course as a static site in build/book/html, every lesson executed here (site mode)

SHELL := /bin/bash
PYTHON ?= python3
LAB_ARGS ?=
# Jupyter refuses to run as root (containers, CI) unless told; as anyone else this is empty.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
PYTEST_ARGS ?=
# uv from PATH, else a private copy installed from PyPI into .uv/ (no curl | sh, no root).
UV := $(or $(shell command -v uv 2>/dev/null),$(CURDIR)/.uv/bin/uv)
RUN := $(UV) run --no-sync
# The DALI extra only resolves to a wheel on Linux x86_64; elsewhere it installs nothing.
# --compile-bytecode: .pyc files written once at install (about 40 s), so that no kernel, worker or
# torchrun rank compiles torch from source on import (where PYTHONDONTWRITEBYTECODE is set, each did).
SYNC := $(UV) sync --locked --extra dali --compile-bytecode

.PHONY: book env lab test test-oldest test-peers test-gpu node-env wheelhouse test-browser browser-deps peers-deps bench notebooks lint slides slides-deps clean

$(CURDIR)/.uv/bin/uv:
	$(PYTHON) -m venv $(CURDIR)/.uv
	$(CURDIR)/.uv/bin/python -m pip install --quiet uv

env: | $(UV)
	$(SYNC)

lab: env
	$(RUN) jupyter lab notebooks $(ALLOW_ROOT) $(LAB_ARGS)

lint: env
	$(RUN) ruff check src tests notebooks tools conftest.py

# The tests run offline: in a fresh network namespace with only localhost (up), where the machine
# lets an unprivileged user make one (Linux with user namespaces and iproute2); elsewhere the test
# process's own socket guard (conftest.py) still refuses outside addresses.
OFFLINE := $(shell unshare -rn true 2>/dev/null && command -v ip >/dev/null 2>&1 && echo yes)
ifeq ($(OFFLINE),yes)
IN_NETNS := GPUFEED_OFFLINE=1 unshare -rn sh -c 'ip link set lo up && exec "$$@"' sh
endif

# make test: the datasets the lessons generate are built first, once, with every core (`gpufeed data
# prepare`: the lessons then find them, rather than two notebooks building one at the same time);
# then the tests, doctests and notebooks on every core (pytest-xdist, TEST_JOBS workers): a lesson
# runs in a worker of its own while tests fill the other workers. What must not share the machine
# with its own kind keeps to one worker (--dist loadgroup; the groups are set in conftest.py).
TEST_JOBS ?= auto
test: lint
	GPUFEED_QUICK=1 $(RUN) python -m gpufeed data prepare
	GPUFEED_QUICK=1 $(IN_NETNS) $(RUN) pytest -n $(TEST_JOBS) --dist loadgroup --nbmake --nbmake-timeout=900 \
		-m "not browser" $(PYTEST_ARGS)

# Tests in a real browser (Debian's chromium, driven headless): the slide deck, JupyterLab and the
# site (run `make book` first: tests/test_book.py opens build/book/html).
# Installs what they need first, so it needs the network (and root for apt) on a fresh machine.
# The peer loaders of `gpufeed bench --peers` (FFCV, SPDL, torchdata) and the Debian libraries they
# build or run against, installed with apt-get when root and missing; then the `peers` extra.
PEERS_APT = libturbojpeg0-dev libopencv-dev pkg-config libavdevice59 libavfilter8 libavformat59 libavcodec59 libswscale6
peers-deps: env
	@missing=$$(for p in $(PEERS_APT); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y --no-install-recommends $$missing; \
	  else echo "peers-deps: install these Debian packages first (as root): $$missing"; exit 1; fi; fi
	$(SYNC) --extra peers

# The peers' adapters, each run on a tiny dataset (tests/test_peers.py; skipped where a peer is missing).
test-peers: peers-deps
	GPUFEED_QUICK=1 GPUFEED_REQUIRE_PEERS=1 $(IN_NETNS) $(RUN) pytest tests/test_peers.py src/gpufeed/measure/peers.py $(PYTEST_ARGS)

CHROMIUM ?= /usr/bin/chromium
browser-deps:
	@if [ ! -x "$(CHROMIUM)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "browser-deps: installing Debian's chromium with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi
	@test -x "$(CHROMIUM)" || { echo "browser-deps: no Chromium at $(CHROMIUM): run 'sudo apt-get install chromium' (Debian) or pass CHROMIUM=/path/to/chromium" >&2; exit 1; }

test-browser: env browser-deps slides-deps
	GPUFEED_QUICK=1 GPUFEED_REQUIRE_BROWSER=1 GPUFEED_CHROMIUM=$(CHROMIUM) $(IN_NETNS) $(RUN) pytest -m browser $(PYTEST_ARGS)

# The workshop deck: slides/dist (static HTML) from slides/slides.md with the pinned Slidev.
slides-deps:
	@command -v npm >/dev/null || { echo "slides-deps: needs Node.js (20.12 or newer) and npm, e.g. apt-get install nodejs npm"; exit 1; }
	@if [ ! -d slides/node_modules ] || [ slides/package-lock.json -nt slides/node_modules ]; then \
		cd slides && npm ci --no-audit --no-fund && touch node_modules; \
	fi

# --base ./ : relative asset URLs, so dist/ can be served from any path (and the hash router needs
# no server-side fallback). The plots are committed; tools/deck_plots.py refreshes them.
slides: slides-deps
	cd slides && ./node_modules/.bin/slidev build --out dist --base ./

# The oldest versions pyproject.toml allows of what the course leans on most (tests/test_workflows.py
# checks them against pyproject's floors), in a second venv beside .venv: the same tests as
# `make test`, so that an API newer than the floor fails here rather than on a learner's machine.
OLDEST := torch==2.9.* torchvision==0.24.* tensordict==0.10.*
OLDEST_VENV ?= $(CURDIR)/.venv-oldest
test-oldest: | $(UV)
	$(UV) venv --quiet --allow-existing $(OLDEST_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(OLDEST_VENV)/bin/python -e . --group dev $(foreach r,$(OLDEST),"$(r)")
	$(OLDEST_VENV)/bin/python -c "import torch, torchvision, tensordict as t; print('test-oldest: torch', torch.__version__, 'torchvision', torchvision.__version__, 'tensordict', t.__version__)"
	GPUFEED_QUICK=1 $(OLDEST_VENV)/bin/python -m gpufeed data prepare
	GPUFEED_QUICK=1 $(IN_NETNS) $(OLDEST_VENV)/bin/python -m pytest -n $(TEST_JOBS) --dist loadgroup --nbmake --nbmake-timeout=900 \
		-m "not browser" $(PYTEST_ARGS)

# An offline GPU node (Python, torch and torchvision installed, often in a venv of their own; no
# internet): on a machine with internet, `make wheelhouse` collects the wheels the node lacks for its
# Python and platform (WHEELHOUSE_ARGS="--python 3.12 --glibc 2.28 --have torch,torchvision,numpy,
# pillow,matplotlib --dali"; see tools/wheelhouse.py) and writes .gpufeed-commit, the commit a copy
# without .git reports; then copy the checkout with wheelhouse/ to the node (README, "Testing on a
# GPU node").
WHEELHOUSE ?= $(CURDIR)/wheelhouse
WHEELHOUSE_ARGS ?=
wheelhouse: env
	$(RUN) python tools/wheelhouse.py collect --out $(WHEELHOUSE) --uv "$(UV)" --pip "$(UV) tool run pip" $(WHEELHOUSE_ARGS)

# On the node: a venv of the node's python that sees that python's own packages (its torch, also
# where that python is itself a venv: its site folders in a .pth, not --system-site-packages), after
# checking that it has every --have package, and that every package pip will see there, the node's and
# the wheels', fits the others (else one line naming the conflict); then the wheelhouse installed
# without an index, and this checkout's src/ on the path. Where OUT is set its log goes there as it
# is written, and where it fails run.json and summary.txt too: a run that dies here still says why.
NODE_PYTHON ?= python3
NODE_VENV ?= $(CURDIR)/.venv-node
node-env: $(NODE_VENV)/.installed
$(NODE_VENV)/.installed: $(WHEELHOUSE)/requirements.txt
	set -o pipefail; $(NODE_PYTHON) tools/wheelhouse.py node-env --venv $(NODE_VENV) --wheelhouse $(WHEELHOUSE) \
		$(if $(OUT),--out "$(OUT)") 2>&1 | tee $(NODE_VENV).log
	touch $@

# make test-gpu: one run that fits a short GPU slot (tools/gpurun/, its steps one row each in
# tools/gpurun/steps.py): preflight (stops at once, one line, if the node lacks something, disk for
# the plan's datasets included), the cuda tests with pytest-xdist, the same under the CUDA Stream
# Sanitizer, every notebook in quick mode several at a time (each saved after every cell), then
# full-mode references one at a time, those of the lessons whose claims have no GPU number of ours
# first, then the stalest (results/<gpu>/references.json), as many as fit. GPU_PLAN=references runs
# the references right after the cuda tests (then the sanitizer and the quick notebooks with what is
# left). Every pytest runs with plugin autoload off, the plugins it needs named. GPU_BUDGET_S counts
# from make's start (GPU_STARTED), so `make node-env` is inside it: 460 s returns within 480 s on one
# node; a large budget (CI) does everything. It prints its plan first (estimates from the committed
# runs: results/<gpu>/run.json, the H100's for a GPU never seen), writes GPU_RUN (run.json with the
# plan, junit, references, logs, executed notebooks with their figures) and packs it into GPU_ARCHIVE
# (under 12 MiB, what it leaves out named) after every step; where OUT is set, OUT also gets run.json,
# summary.txt (one screen), the node-env log and the junit files, each as soon as it exists.
# LESSONS="tests 03 08 bench" runs only those parts. `not run (budget)` is no failure: the next slot
# runs it. GPUFEED_GPU_STANDIN=cpu checks the run on a CPU (the simulator for CUDA, quick mode). With
# wheelhouse/ present, offline in the node's venv. `python tools/gpurun plan --gpu "NVIDIA H200"
# --cores 16` prints the plan a GPU would get, running nothing.
GPU_BUDGET_S ?= 460
GPU_STARTED := $(shell date +%s)
GPU_PLAN ?= default
LESSONS ?= all
GPU_RUN ?= $(CURDIR)/build/gpu-run
GPU_ARCHIVE ?= $(if $(OUT),$(OUT),$(CURDIR)/build)/gpu-run.tar.gz
GPU_ARGS ?=
ifneq ($(wildcard $(WHEELHOUSE)/requirements.txt),)
GPU_ENV := node-env
GPU_PYTHON := $(NODE_VENV)/bin/python
else
GPU_ENV := env
GPU_PYTHON := $(RUN) python
endif
test-gpu: $(GPU_ENV)
	GPURUN_NODE_ENV_LOG=$(NODE_VENV).log $(GPU_PYTHON) tools/gpurun run --budget $(GPU_BUDGET_S) --started $(GPU_STARTED) \
		--plan $(GPU_PLAN) --lessons "$(LESSONS)" --run-dir $(GPU_RUN) --archive $(GPU_ARCHIVE) \
		$(if $(OUT),--out "$(OUT)") $(GPU_ARGS)

# The course as a static site (Sphinx + MyST-NB, tools/book.py): the datasets of BOOK_MODE first (all
# cores, once), then the lessons the cache lacks run in BOOK_MODE (site: the sizes whose verdicts this
# 2-core machine decides; quick: a check that every page builds), offline like `make test`, one at a
# time (BOOK_JOBS=2: two at a time, sharing the cores they measure), then the pages are built from the
# cache into build/book/html. `make slides` first puts the deck in.
BOOK_JOBS ?= 1
BOOK_MODE ?= site
book: env
	GPUFEED_MODE=$(BOOK_MODE) $(RUN) python -m gpufeed data prepare
	GPUFEED_MODE=$(BOOK_MODE) $(IN_NETNS) nice $(RUN) python tools/book.py execute --jobs $(BOOK_JOBS)
	GPUFEED_MODE=$(BOOK_MODE) nice $(RUN) python tools/book.py build

bench: env
	$(RUN) python -m gpufeed bench $(BENCH_ARGS)

notebooks: env
	$(RUN) python tools/notebooks.py build

clean:
	rm -rf .venv .uv .venv-oldest .venv-node
