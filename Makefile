# The two commands of the README:
#   make demo   run the main job (synthetic LETOR-like store -> every learner -> metrics table)
#   make test   run the test suite
#   make quick  the developer's inner loop: the suite without the tests marked slow (about a minute warm)
# Both create .venv with python3 if it is missing and install streamrank into it: make demo the package alone
# (what the demo needs), make test / make quick with the test, plot and docs extras.

PYTHON_BOOT ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
DEMO_ARGS   ?=

.PHONY: demo test quick venv clean-venv

$(PY):
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test,plot,docs]"
	touch $@ $(VENV)/.installed-demo

venv: $(VENV)/.installed-test

demo: $(VENV)/.installed-demo
	$(PY) -m streamrank.demo $(DEMO_ARGS)

# pytest exits 5 when it collects no test: report it instead of failing make.
# -n auto: one pytest-xdist worker per core; --dist loadfile keeps a test file on one worker, so its
# module-scoped fixtures (dask clusters, stores built by CLI runs) are made once (tests/conftest.py deals
# the cells of the big independent files out one by one).  The workers share one numba cache (streamrank
# locks each kernel's cache saves).
PYTEST_ARGS ?= -n auto --dist loadfile
# The test processes' environment:
# - bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on some CI
#   machines): every pytest(-xdist) process and every CLI subprocess a test starts imports streamrank and the
#   test modules, and compiling them from source costs each worker about 5 CPU-s more per run (collection:
#   10-12 CPU-s instead of 5.5);
# - one BLAS thread per process: the xdist workers already take every core, and OpenBLAS's own threads on top
#   only wait for each other (tests/rankrls quick: 30.0 instead of 31.7-33.7 CPU-s, 23-33 instead of 32-41 s
#   wall at load 5).  Set OPENBLAS_NUM_THREADS yourself to override it.
# - one numba cache for make test, make quick and .ci/run: .numba_cache in the checkout, where .ci/run puts it,
#   so a quick loop after a full run (or after CI's run in the same clone) loads its kernels instead of
#   compiling them again beside the sources (112 s instead of 52 s for make quick, measured).  Set
#   NUMBA_CACHE_DIR yourself to override it.
OPENBLAS_NUM_THREADS ?= 1
NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
TEST_ENV = PYTHONDONTWRITEBYTECODE= OPENBLAS_NUM_THREADS=$(OPENBLAS_NUM_THREADS) NUMBA_CACHE_DIR=$(NUMBA_CACHE_DIR)
test: $(VENV)/.installed-test
	$(PY) -m ruff check streamrank pipelines data_recipes tests benchmarks examples docs
	$(TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

quick: $(VENV)/.installed-test
	$(TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider -m "not slow" $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
