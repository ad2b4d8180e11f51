# make perf: set up, then run the CPU performance suite (the main job)
# make test: set up, lint (make lint), build the docs (make docs), then run perfsuite's own tests
# make test-e2e: set up, then run the tests of the real-process tier (real processes end to end)
# make slurm-test: set up, then run the Slurm recipes (examples/) through a Slurm cluster on this machine
# make test-floors: the fast tests in a venv of their own at the lowest versions pyproject.toml allows
PYTHON ?= python3
# Python caches bytecode (and pytest its rewritten test modules) in __pycache__: the tests
# start hundreds of Python processes that import perfsuite, and machines that set
# PYTHONDONTWRITEBYTECODE would compile it anew in each (7 s of CPU a pytest process).
unexport PYTHONDONTWRITEBYTECODE
VENV   ?= .venv
BIN    := $(VENV)/bin
# Without an NVIDIA GPU: the CPU builds of torch and TensorFlow (an unpinned torch pulls
# several GB of CUDA packages).
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
ifeq ($(HAS_GPU),yes)
# A CUDA torch; TensorFlow's CUDA build pins other nvidia-* wheels, so it gets a venv of its
# own (pip install -e ".[tf-gpu]"): here its GPU cases skip and say so.
FRAMEWORKS := -e ".[torch,dev,history,docs]" "tensorflow-cpu>=2.16.1" pillow
else
FRAMEWORKS := -e ".[dev,history,docs]" "torch==2.13.0" "tensorflow-cpu>=2.16.1" pillow
endif
# The results history's change points, without Otava's pins (pyproject.toml's history extra
# says why).
OTAVA := "apache-otava==0.8.0"
PERF_REPORT ?= perf-report
# GPT-2 small on one CPU worker a framework, at its CPU sequence length (128): the transformer
# case beside the CNNs (docs/figures.md, "The CPU suite").
PERF_ARGS ?= --model cifar10 --model resnet50 --model gpt2 -k "not gpt2-cpu2" --perf-missing-baseline save

.PHONY: setup perf test test-e2e test-floors slurm-test lint docs clean
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(FRAMEWORKS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(OTAVA)
	touch $@

# The report's path comes last, also when a regression fails the run; make keeps pytest's status.
perf: setup
	$(BIN)/python -m pytest tests_perf -m "cpu and not slow" $(PERF_ARGS) --perf-report $(PERF_REPORT) -rs; \
	status=$$?; if [ -f $(PERF_REPORT)/report.html ]; then echo "report: $(PERF_REPORT)/report.html"; fi; exit $$status

# Two xdist workers pay on 2 cores: the tests mostly wait on burst subprocesses. Tests that
# share a heavy import (TensorFlow) stay in one worker through xdist_group. The last line is
# the CPU that pytest and every process it started used (tests/cpu_seconds.py). make test
# leaves out the real-process tier (the e2e marker, tests/conftest.py's E2E_MODULES), which
# make test-e2e runs; CI (.ci/run) runs both.
PYTEST_TIER := $(BIN)/python tests/cpu_seconds.py $(BIN)/python -m pytest tests -q -n 2 --dist loadgroup --ignore=tests/slurm --durations=15
test: setup lint docs
	$(PYTEST_TIER) -m "not e2e"

test-e2e: setup
	$(PYTEST_TIER) -m e2e

# The versions pyproject.toml declares are versions the tests ran on: every `>=` floor of the
# dependencies and of the torch, tf, history and dev extras pinned exactly (tests/floor_pins.py
# writes the constraints), wheels only, in .venv-floors, then the fast tier there. torch comes
# from its CPU wheels' index where that answers; elsewhere PyPI's torch is a CUDA build, about
# 3 GB with its nvidia-* wheels, which runs on a CPU too. TensorFlow is tensorflow-cpu, as above.
FLOORS_VENV ?= .venv-floors
FLOORS_EXTRAS := torch tf history dev
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
$(FLOORS_VENV)/.installed: pyproject.toml Makefile tests/floor_pins.py
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(PYTHON) tests/floor_pins.py $(FLOORS_EXTRAS) > $(FLOORS_VENV)/constraints.txt
	$(FLOORS_VENV)/bin/python -m pip install --disable-pip-version-check --only-binary=:all: \
		$$($(PYTHON) tests/floor_pins.py --index $(TORCH_CPU_INDEX)) -c $(FLOORS_VENV)/constraints.txt \
		-e ".[torch,history,dev]" tensorflow-cpu keras pillow
	$(FLOORS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $(OTAVA)
	touch $@

test-floors: $(FLOORS_VENV)/.installed
	$(FLOORS_VENV)/bin/python -m pip list --disable-pip-version-check --format=freeze > $(FLOORS_VENV)/installed.txt
	$(FLOORS_VENV)/bin/python tests/cpu_seconds.py $(FLOORS_VENV)/bin/python -m pytest tests -q -n 2 \
		--dist loadgroup --ignore=tests/slurm -m "not e2e" -p no:cacheprovider

# tests/slurm starts slurmctld, 8 slurmd and munged on 127.0.0.1 and submits the recipes with
# sbatch. The first step installs Debian's Slurm and MUNGE packages where missing (as root),
# before pytest starts; where Slurm cannot run, it says why and the tests skip with the reason (-rs).
slurm-test: setup
	$(BIN)/python tests/slurm_cluster.py
	$(BIN)/python -m pytest tests/slurm -rs

# The documentation site (docs/, mkdocs.yml) into build/site: a warning, a broken link or
# anchor among them, fails the build. docs/hooks.py writes the generated parts.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The same checks as .pre-commit-config.yaml. mypy reads [tool.mypy] in pyproject.toml (strict
# on contract/, analysis/, store/ and history/) and keeps its cache in .mypy_cache.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(FLOORS_VENV) $(PERF_REPORT)
