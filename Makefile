# minductor: `make demo`, `make test`, `make docs`, `make tangle`, `make site-check`
# (and `make test-slow`, `make test-all`).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the book's examples compile afresh (chapter 27's turn the graph cache on themselves)
DOCS_ENV := NO_MKDOCS_2_WARNING=1 TRITON_INTERPRET=1 MINDUCTOR_GRAPH_CACHE=0

.PHONY: install demo test test-fast book-build test-slow test-all docs site-check tangle clean

install: $(STAMP)

# Where PYTHONDONTWRITEBYTECODE is set, Python never caches what it compiles, and each
# process that imports torch compiles its sources again (10 s). Our commands let
# Python write its caches; the install below compiles the packages once.
unexport PYTHONDONTWRITEBYTECODE

# torch is pinned here, before the editable install, so nothing picks a torch for
# us (pyproject says only torch>=2.11). The rest goes in with uv, which fetches and
# unpacks in parallel (about 10 s against pip's 80 s); pip does it if uv cannot.
# Then the packages are byte-compiled on all cores at once (pip alone does it on one),
# leaving out what no test or build imports (test suites, benchmarks, the other
# transformers models, pip itself...): about 5,000 files of 12,000, 17 s instead of 32.
# A module left out is compiled, once, by the first process that imports it.
# The jupyter kernel the exercise notebooks run on ships inside the venv
# (ipykernel's python3 kernelspec), nothing to register.
SITE_PACKAGES = $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NOT_IMPORTED := /tests?/|/benchmarks?/|/(pip|setuptools|debugpy|IPython|jedi|prompt_toolkit|pydantic|rich|typer|wcwidth|tzdata)/|/transformers/(models|integrations|pipelines|exporters)/|/torch/(_inductor|onnx|_export|ao|_vendor)/|/torch/testing/_internal/distributed/|/numpy/(distutils|f2py)/|/sympy/(physics|parsing|stats|combinatorics|plotting)/|/pygments/lexers/|/huggingface_hub/(inference|cli)/
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --no-compile torch==2.13.0
	($(PY) -m pip install -q uv && $(PY) -m uv pip install --python $(PY) -e ".[dev]") \
	  || $(PY) -m pip install --no-compile -e ".[dev]"
	$(PY) -m compileall -q -j 0 -x '$(NOT_IMPORTED)' "$(SITE_PACKAGES)" > /dev/null || true  # a few files are for other Pythons
	touch $@

demo: $(STAMP)
	$(PY) -m minductor.demo

# The tests on one process per core, four at most (pytest-xdist); on two cores a third
# worker made the run slower (7m14 against 6m30 on a fresh clone): each worker
# collects, and starts the exercises' zygote, on its own. TEST_JOBS=0 runs them in one
# process. `make test` leaves out the tests marked `slow` (model and harness matrices,
# decoding variants, every OpInfo case's second sample): `make test-slow` runs those,
# `make test-all` everything. Its book build does not execute the exercise notebooks,
# whose cells tests/test_exercises.py runs; `make docs` and `make site-check` do.
TEST_JOBS ?= $(shell nproc)
PYTEST := $(PY) -m pytest -q -n $(TEST_JOBS) --maxprocesses=4 --dist worksteal
#
# The tests and the book build run side by side (make -j2, each one's output printed
# whole when it ends): the build takes one core for under a minute, and the two test
# workers leave about that much idle between them (start-up, the last long tests).
test: $(STAMP)
	$(PY) tools/tangle.py --check
	$(PY) tools/make_stubs.py --check
	$(MAKE) --no-print-directory -j2 --output-sync=target test-fast book-build

test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

book-build: $(STAMP)
	MINDUCTOR_EXECUTE_NOTEBOOKS=false MINDUCTOR_SEARCH=false $(DOCS_ENV) $(VENV)/bin/mkdocs build --strict
	$(PY) tools/check_exec_output.py site

test-slow: $(STAMP)
	$(PYTEST) -m slow

test-all: $(STAMP)
	$(PY) tools/tangle.py --check
	$(PY) tools/make_stubs.py --check
	$(PYTEST)
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict
	$(PY) tools/check_exec_output.py site

docs: $(STAMP)
	$(DOCS_ENV) $(VENV)/bin/mkdocs serve

# The built site in headless Chromium with no network: the preface's diagram is an SVG,
# no page logs a JavaScript error or requests anything off localhost. Not in `make test`
# (CI has no browser); CHROMIUM=/path/to/chromium if it is not on PATH.
CHROMIUM ?= chromium
site-check: $(STAMP)
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict
	$(PY) tools/site_check.py --site site --chromium $(CHROMIUM)

tangle: $(STAMP)
	$(PY) tools/tangle.py
	$(PY) tools/make_stubs.py

clean:
	rm -rf site .pytest_cache .hypothesis .ruff_cache .cache/mkdocs-jupyter
	rm -rf *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
