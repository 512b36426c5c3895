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
	$(PIP) install -q --upgrade pip "setuptools>=68" wheel "Cython>=3.0" "numpy>=2.0"

$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py
	$(PIP) install -q $(TORCH)
	$(PIP) install -q --no-build-isolation -e ".[test,peers,model,cluster]"
	touch $@

install: $(VENV)/.installed

# Rebuild the Cython extensions in place (a no-op when nothing changed).
build: install
	$(BIN)/python setup.py -q build_ext --inplace

test: build
	MASKLAB_SHARED=$(SHARED) $(BIN)/python -m pytest -q

# The main job: every installed engine but the naive oracle, on the embedded datasets
# with the Tekken vocabulary, then the report (tables and figures) in results/quick/.
# A run that was interrupted resumes; BENCH_FLAGS adds options (e.g. --jobs 1).
BENCH_FLAGS ?= --jobs 2
bench: build
	$(BIN)/masklab bench --quick --out results/quick $(BENCH_FLAGS)
	$(BIN)/masklab report results/quick > /dev/null
	@echo "report: results/quick/report.md (figures: results/quick/*.png, *.pdf)"

lint: install
	$(BIN)/ruff check toolkit strategies tests setup.py

clean:
	rm -rf build toolkit/*.c toolkit/*.so toolkit/*.html toolkit/*/*.c toolkit/*/*.so toolkit/*/*.html strategies/*/*.c strategies/*/*.so strategies/*/*.html *.egg-info
