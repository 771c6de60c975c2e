# kvtune: the two commands a new user runs (see README.md).
#   make demo   set up .venv, run a quick `kvtune bench` (GPU if present, else the simulator)
#   make test   set up .venv, run the test suite (CPU only; Triton kernels under the interpreter)
#
# Without an NVIDIA GPU the CPU build of torch is installed before the project, so pip does not
# pull a multi-GB CUDA build. TORCH_CPU names it; on a machine whose pip cannot find it locally,
# add the PyTorch CPU index: make test TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH_CPU ?= torch==2.13.0
TORCH_CPU_INDEX ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvtune-installed
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)

.PHONY: demo test setup clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "kvtune setup: upgrading pip in $(VENV)"
	$(PY) -m pip install --progress-bar off --upgrade pip | grep -v '^Requirement already' || true
ifneq ($(HAS_GPU),yes)
	@echo "kvtune setup: no NVIDIA GPU here; installing the CPU build of PyTorch ($(TORCH_CPU))"
	$(PY) -m pip install --progress-bar off "$(TORCH_CPU)" $(if $(TORCH_CPU_INDEX),--index-url $(TORCH_CPU_INDEX)) | grep -E '^(Collecting|Successfully)' || true
endif
	@echo "kvtune setup: installing kvtune and its dependencies (triton, optuna, pandas, plotly, streamlit, ...)"
	set -o pipefail; $(PY) -m pip install --progress-bar off -e ".[dev]" | grep -E '^(Collecting|Successfully|ERROR)' || test $${PIPESTATUS[0]} -eq 0
	touch $(STAMP)

demo: setup
	$(VENV)/bin/kvtune info
	$(VENV)/bin/kvtune bench --suite threshold --backend auto \
	    --policies flashinfer-tensor-core,fa3,trtllm-oversub,fixed-split,no-split --out results
	@echo "Results are under results/ (one folder per run: manifest.json, measurements.parquet)."

test: setup
	bash scripts/ensure_chromium.sh
	bash scripts/ensure_postgres.sh
	$(PY) -m pytest -q -p no:cacheprovider tests

clean-venv:
	rm -rf $(VENV)
