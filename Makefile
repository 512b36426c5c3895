# masklab: the two commands a new user types are `make bench` and `make test`.
# Each creates .venv when it is missing and installs what it needs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
# torch first, pinned: xgrammar and transformers depend on it, and without the
# pin pip pulls the newest build with gigabytes of CUDA packages.
TORCH  := torch==2.13.0
SHARED ?= $(if $(MASKLAB_SHARED),$(MASKLAB_SHARED),../shared)

.PHONY: test bench build install lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip "setuptools>=77" wheel "Cython>=3.0" "numpy>=2.0"

# llama-cpp-python (peer:llama.cpp) is on PyPI as source only: its wheel is built once,
# CPU-only, into a cache outside the checkout (about 5 minutes on 2 cores) and every
# later install, in any clone, takes it from there.
WHEELS ?= $(HOME)/.cache/masklab/wheels
LLAMA_CPP := 0.3.36
LLAMA_CMAKE := -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF

$(WHEELS)/.llama-cpp-python-$(LLAMA_CPP): | $(BIN)/python
	mkdir -p $(WHEELS)
	@echo "building llama-cpp-python $(LLAMA_CPP) CPU-only (once, about 5 minutes on 2 cores) into $(WHEELS)"
	CMAKE_ARGS="$(LLAMA_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PIP) wheel -q --no-deps -w $(WHEELS) "llama-cpp-python==$(LLAMA_CPP)"
	touch $@

# The package is installed without its extensions (MASKLAB_NO_EXT=1): `build` makes
# them once, in place, where pip would build them a first time into build/ and `build`
# a second.
$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py $(WHEELS)/.llama-cpp-python-$(LLAMA_CPP)
	$(PIP) install -q $(TORCH)
	MASKLAB_NO_EXT=1 $(PIP) install -q --find-links $(WHEELS) --no-build-isolation -e ".[test,peers,model,cluster]"
	touch $@

install: $(VENV)/.installed

# Rebuild the Cython extensions in place (a no-op when nothing changed), on every core:
# 1 min on 2 cores from scratch, 2 min on one.
build: install
	$(BIN)/python setup.py -q build_ext --inplace -j $$(nproc)

# The suite on TEST_JOBS workers (pytest-xdist; 0: in this process, e.g. for a debugger).
TEST_JOBS ?= 2
test: build
	MASKLAB_SHARED=$(SHARED) $(BIN)/python -m pytest -q -n $(TEST_JOBS)

# The main job: every installed engine but the naive oracle, on the embedded datasets
# with the Tekken vocabulary, each given masklab's grammar of every item (like for like:
# the report's warnings are then differences of language), then the report (tables and
# figures) in results/quick/.  A run that was interrupted resumes; BENCH_FLAGS adds
# options (e.g. --jobs 1).
BENCH_FLAGS ?= --jobs 2
bench: build
	$(BIN)/masklab bench --quick --source grammar --out results/quick $(BENCH_FLAGS)
	$(BIN)/masklab report results/quick > /dev/null
	@echo "report: results/quick/report.md (figures: results/quick/*.png; masklab report --pdf adds PDFs)"

lint: install
	$(BIN)/ruff check toolkit strategies tests setup.py

clean:
	rm -rf build toolkit/*.c toolkit/*.so toolkit/*.html toolkit/*/*.c toolkit/*/*.so toolkit/*/*.html strategies/*/*.c strategies/*/*.so strategies/*/*.html *.egg-info
