# Developer entry points: make setup | make lab | make test | make build
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV)/bin)
export PATH := $(BIN):$(PATH)
CHROMIUM ?= /usr/bin/chromium
LAB_PORT ?= 8888

STAMP_INSTALL := $(VENV)/.stamp-install
STAMP_UI := ui-tests/node_modules/.stamp-install
LABEXT_OUT := jupyter_gpumem/labextension/static/style.js
LABEXT_SRC := $(shell find labextension/src labextension/style labextension/schema -type f 2>/dev/null) \
	labextension/package.json labextension/tsconfig.json

.PHONY: help setup build lab test test-fast test-computing test-ts lint format lint-imports test-browser test-notebooks notebooks test-python test-jax-matrix chromium prometheus hub-proxy mutation clean \
	gpu-proof gpu-proof-wheels gpu-proof-dry gpu-proof-py312

help:
	@echo "make setup   .venv, editable install (builds the lab extension), ui-tests deps"
	@echo "make build   rebuild the lab extension after editing labextension/src"
	@echo "make lab     JupyterLab with the extension on notebooks/quickstart.ipynb"
	@echo "make lint    ruff (format, rules, import order) on Python; prettier and eslint on the panel's TypeScript"
	@echo "make format  what make lint checks, fixed in place"
	@echo "make test    lint, import layers, unit tests of the panel (node), browser tests (chromium), the notebooks"
	@echo "             from the built wheel, the JAX version matrix, then pytest (the browser tests beside the rest)"
	@echo "make test-fast  lint and pytest without the JupyterHub test: the inner loop (no browser, notebooks, matrix)"
	@echo "make hub-proxy  configurable-http-proxy (npm, tests/server/hub_proxy) for the JupyterHub test"
	@echo "make test-jax-matrix  the tests marked jax_versions under the JAX releases of tests/jax_matrix.py"
	@echo "             (all under the oldest, each under two of the others; JAX_MATRIX_ARGS=--full: all under each)"
	@echo "make notebooks  run the notebooks from the built wheel; their outputs go into notebooks/"
	@echo "make xprof-anchor  XProf (xprof from PyPI) in its own environment, for bench/bench_xprof_anchor.py"
	@echo "make gpu-proof-wheels  the Python 3.12 wheels the GPU machine lacks, into .whl/ (bench/README.md, On a GPU)"
	@echo "make gpu-proof-dry     the GPU proof's checks that need no GPU, in seconds"
	@echo "make gpu-proof         the GPU proof itself (on the GPU machine; results under \$$OUT)"
	@echo "make mutation   mutation testing of the pure core (slow; not part of make test): score and survivors"

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# The editable install runs the hatch jupyter-builder hook: jlpm install + build of labextension/.
$(STAMP_INSTALL): $(PY) pyproject.toml labextension/package.json labextension/yarn.lock
	$(PY) -m pip install -q -e ".[test]"
	@# Point Jupyter's labextensions folder at the build output so `make build` shows at once.
	$(BIN)/jupyter-builder develop --overwrite . >/dev/null
	touch $@

$(LABEXT_OUT): $(STAMP_INSTALL) $(LABEXT_SRC)
	cd labextension && jlpm build
	touch $@

build: $(LABEXT_OUT)

# Browser test deps only where a browser exists (make test installs one first).
$(STAMP_UI): ui-tests/package.json ui-tests/yarn.lock $(STAMP_INSTALL)
	@if [ -x "$(CHROMIUM)" ]; then \
		cd ui-tests && jlpm install && touch ../$@; \
	else echo "no $(CHROMIUM): browser test deps not installed (make test installs chromium)"; fi

setup: $(STAMP_INSTALL) $(LABEXT_OUT)
	@if [ -x "$(CHROMIUM)" ]; then $(MAKE) --no-print-directory $(STAMP_UI); fi

notebooks/quickstart.ipynb:
	@echo "notebooks/quickstart.ipynb is missing" && exit 1

# The repository as the root (the quickstart links to docs/), the quickstart open, and the URL
# printed opening it. tests/test_make_lab.py starts this command.
LAB_COMMAND = $(BIN)/jupyter lab --allow-root --no-browser --port=$(LAB_PORT) \
	--ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks/quickstart.ipynb \
	notebooks/quickstart.ipynb

lab: setup notebooks/quickstart.ipynb
	$(LAB_COMMAND)

chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
		echo "installing Debian's chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi

# Debian's prometheus ships promtool: tests/server/test_prometheus_deploy.py checks deploy/ with both.
prometheus:
	@if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then \
		echo "installing Debian's prometheus"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	fi

# configurable-http-proxy for tests/server/test_hub_end_to_end.py, from the committed lock file.
HUB_PROXY := tests/server/hub_proxy/node_modules/.bin/configurable-http-proxy
$(HUB_PROXY): tests/server/hub_proxy/package.json tests/server/hub_proxy/package-lock.json
	cd tests/server/hub_proxy && npm ci --no-audit --no-fund --loglevel=error
	touch $@

hub-proxy: $(HUB_PROXY)

test-browser: setup chromium
	$(MAKE) --no-print-directory $(STAMP_UI)
	cd ui-tests && GPUMEM_CHROMIUM=$(CHROMIUM) jlpm playwright test

# The panel's pure modules (labextension/test/*.test.ts) under node's own test runner.
test-ts: setup
	cd labextension && jlpm test

# Format and lint: ruff for Python (pyproject's [tool.ruff]), prettier and eslint for the panel's TypeScript.
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	cd labextension && jlpm lint:check

# What `make lint` checks, fixed in place.
format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	cd labextension && jlpm lint

# The layers of docs/architecture.md, as import-linter contracts in pyproject.toml.
lint-imports: setup
	$(BIN)/lint-imports --no-cache

# The notebooks as a user gets them: the built wheel installed in a fresh environment outside the
# repository, each notebook copied out and executed (tests/wheel_notebooks.py); pytest checks the result.
NB_RUN := build/notebooks
test-notebooks: setup
	rm -rf $(NB_RUN)
	$(PY) tests/wheel_notebooks.py --out $(NB_RUN)

# The outputs committed with the notebooks, from the same kind of run.
notebooks: setup
	$(PY) tests/wheel_notebooks.py --out notebooks

# Two workers (pytest-xdist), each taking whole test files (module fixtures are made once); a
# single worker spends most of its time waiting on the kernels and servers its tests start.
PYTEST_WORKERS ?= 2
test-python: setup prometheus hub-proxy
	GPUMEM_EXECUTED_NOTEBOOKS=$(abspath $(NB_RUN)) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests/

# The inner loop: lint and pytest without the JupyterHub test; no browser, notebooks or matrix.
test-fast: lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not hub" tests/

# The tests marked jax_versions under the JAX releases in tests/jax_matrix.py (JAX_VERSIONS), two
# releases at a time, each in an environment cached under ~/.cache/jupyter-gpumem/jax-matrix/: all
# of them under the oldest, each under two of the others (docs/jax-versions.md; --full: all under each).
# JAX_MATRIX_ARGS passes options on, e.g. JAX_MATRIX_ARGS="--versions 0.4.38,0.7.2".
test-jax-matrix: setup
	$(PY) tests/jax_matrix.py $(JAX_MATRIX_ARGS)

# Lint and the panel's unit tests first. Then the browser tests, which mostly wait (on pages,
# servers and polls: about a third of a core), beside the checks that compute, one after another:
# the notebooks, the JAX matrix, pytest. Each target's output is printed whole when it ends (-O);
# any failure fails. What the two sides install is installed before they start.
test: lint lint-imports test-ts chromium prometheus hub-proxy
	$(MAKE) --no-print-directory $(STAMP_UI)
	$(MAKE) --no-print-directory -j2 -O test-browser test-computing

test-computing:
	$(MAKE) --no-print-directory test-notebooks
	$(MAKE) --no-print-directory test-jax-matrix
	$(MAKE) --no-print-directory test-python

# Mutation testing (mutmut) of the pure core against the tests that specify it: the modules and
# tests are listed in pyproject.toml's [tool.mutmut]. Results are kept in mutants/ (a run without
# MUTANTS redoes what is not checked; a change to the tests unchecks the rest); MUTANTS="jupyter_gpumem.core.units*"
# runs that subset again whole. docs/testing.md has the last score and why each survivor is left.
MUTANTS ?=
mutation: $(STAMP_INSTALL)
	nice $(BIN)/mutmut run $(MUTANTS) > mutants-run.log 2>&1 || (tail -20 mutants-run.log; exit 1)
	@$(BIN)/mutmut export-cicd-stats >/dev/null
	@$(BIN)/mutmut results | grep -v "not checked" || true
	@$(PY) -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); c = s["killed"] + s["timeout"]; n = c + s["survived"] + s["no_tests"] + s["suspicious"]; print("mutation score %d/%d = %.1f%% (%d survived, %d without a test; %d not run)" % (c, n, 100.0 * c / max(1, n), s["survived"], s["no_tests"], s["total"] - n))'

clean:
	rm -rf labextension/lib labextension/build-test labextension/tsconfig.tsbuildinfo jupyter_gpumem/labextension \
		ui-tests/test-results ui-tests/playwright-report $(VENV)/.stamp-install $(STAMP_UI) mutants mutants-run.log

# --- XProf, the anchor for %gpumem peak (bench/README.md) ------------------------------------------
# xprof pulls in some 40 packages (gcsfs, grpcio, duckdb, ...), so it gets its own environment; the
# bench runs it as a subprocess on the profile it captures.
XPROF_ANCHOR_ENV := $(HOME)/.cache/xprof-anchor
.PHONY: xprof-anchor
xprof-anchor:
	test -x $(XPROF_ANCHOR_ENV)/bin/python || $(PY) -m venv $(XPROF_ANCHOR_ENV)
	$(XPROF_ANCHOR_ENV)/bin/pip install -q xprof==2.24.2

# --- the GPU proof (bench/README.md, "On a GPU") ---------------------------------------------------
# The wheels the GPU machine lacks, for its Python 3.12 (pins in bench/gpu_proof_wheels.txt); .whl/ is
# git-ignored and travels as a carried path. Emptied first so that exactly one version of each is kept.
WHEEL_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64,--platform $(p))
GPU_PROOF_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_PROOF_PY312 := $(HOME)/.cache/gpu-proof-py312

gpu-proof-wheels:
	rm -rf .whl && mkdir -p .whl
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $(WHEEL_PLATFORMS) \
		-d .whl -r bench/gpu_proof_wheels.txt
	@du -ch .whl/*.whl | tail -1

# A Python 3.12 with the GPU machine's JAX (CPU jaxlib), for the dry run's import check (optional;
# PY312=/path/to/python3.12 where python3.12 is not on the PATH).
PY312 ?= python3.12
gpu-proof-py312:
	$(PY312) -m venv $(GPU_PROOF_PY312)
	$(GPU_PROOF_PY312)/bin/pip install -q jax==0.11.2 jaxlib==0.11.2 pytest pytest-timeout nvidia-ml-py psutil hypothesis \
		typing-extensions pyyaml jinja2 attrs six

gpu-proof-dry:
	GPU_PROOF_DRY=1 GPU_PROOF_PYTHON=$(GPU_PROOF_PYTHON) \
		GPU_PROOF_CHECK_PYTHON=$(wildcard $(GPU_PROOF_PY312)/bin/python) bash bench/gpu_proof.sh

gpu-proof:
	bash bench/gpu_proof.sh
