# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean browser native-deps

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first: the CPU build on local disk; an unpinned torch would pull CUDA.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[all,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/stackcost run resnet18 --batch-size 1,8 --resolution 64 --threads 2 \
		--backends eager,torchscript,inductor,export-aot,onnxruntime,openvino

# The HTML report is tested in a real browser: Debian's chromium, driven by playwright
# (no browser download). Installing it needs root, as on CI machines.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# The native rungs compile C++ on first use: cmake, g++, and oneDNN for the onednn backend.
native-deps:
	@dpkg -s libdnnl-dev >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq libdnnl-dev cmake g++)

test: $(STAMP) browser native-deps
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/harness_overhead.py
	$(PY) benchmarks/agreement.py
	$(PY) benchmarks/fixed_cost.py
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/peaks.py
	$(PY) benchmarks/sampler_overhead.py
	$(PY) benchmarks/native_train_step.py
	$(PY) benchmarks/disturbance_overhead.py

clean:
	rm -rf $(VENV) build src/*.egg-info
