# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements.lock
LOCK_EXTRA   := torch==2.13.0+cpu pip 'setuptools>=77' uv
TORCH_WHEELS ?= /opt/wheels
LOCK_FLAGS   ?=

.PHONY: demo test docs lint lock bench clean browser native-deps

# Python writes each module's bytecode (.pyc) the first time it imports it, and every later
# process reads it. These machines set PYTHONDONTWRITEBYTECODE=1 (and uv installs none), so
# every process compiled everything it imported: `import tensorflow` took 23 s instead of 8,
# `import torch` 5.6 s instead of 2.8, pytest's collection 34 s instead of 16 (AVX2 EPYC).
# Compiling the whole venv at install (uv --compile-bytecode) costs 62 s, more than it saves.
unexport PYTHONDONTWRITEBYTECODE

# Every package comes from requirements.lock, pinned with its hashes (make lock writes it);
# the stamp follows the lock, so a changed lock reinstalls. pip installs only uv, from the
# lock's own uv entry and hashes; uv then makes the venv exactly the lock (uv pip sync: a
# package the lock dropped is removed), 15 s where pip took 3.5 min. torch is the CPU build on
# local disk (TORCH_WHEELS; uv does not read pip's find-links); the lock pins
# torch==2.13.0+cpu and that wheel's hash, so a machine without it stops here rather than pull
# a CUDA torch. --no-build-isolation: stackcost itself is built with the locked setuptools.
$(STAMP): pyproject.toml $(LOCK) Makefile
	$(PYTHON) -m venv $(VENV)
	awk '/^uv==/{p=1} p{print} p && !/\\$$/{exit}' $(LOCK) > $(VENV)/uv-requirement.txt
	$(PY) -m pip install --quiet --require-hashes -r $(VENV)/uv-requirement.txt
	$(VENV)/bin/uv pip sync --python $(PY) --require-hashes --find-links $(TORCH_WHEELS) $(LOCK)
	$(VENV)/bin/uv pip install --python $(PY) --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Re-resolve pyproject.toml's extras all and dev into the lock, keeping today's pins where they
# still fit; a version changes only as a diff of requirements.lock. To move versions on:
#   make lock LOCK_FLAGS=--upgrade                        (everything)
#   make lock LOCK_FLAGS='--upgrade-package pyyaml'       (one package)
# LOCK_EXTRA are pinned beside the project's own needs: the tools that install and build it,
# and torch's CPU build, found in TORCH_WHEELS (where pip's find-links point on these machines).
# The lock is replaced only when it changed, so an unchanged one does not reinstall.
lock: $(STAMP)
	cp $(LOCK) $(LOCK).new
	printf '%s\n' $(LOCK_EXTRA) | $(VENV)/bin/uv pip compile pyproject.toml - \
		--extra all --extra dev --python $(PY) --find-links $(TORCH_WHEELS) \
		--generate-hashes --custom-compile-command 'make lock' --quiet $(LOCK_FLAGS) \
		-o $(LOCK).new || { rm -f $(LOCK).new; exit 1; }
	if cmp -s $(LOCK) $(LOCK).new; then rm $(LOCK).new; else mv $(LOCK).new $(LOCK); fi

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

# The suite in two parts. First on every core at once: one pytest-xdist lane per core (at
# most 4: each lane holds its own torch, models and warm workers), each lane pinned to its
# core, so one lane's work never reads as disturbance in the other's timed loops
# (tests/conftest.py); --dist loadscope keeps a module's tests, and its module-scoped runs,
# in one lane. Then, unpinned and alone, the tests marked whole_machine (2-thread cells,
# burners on the other cores, Ray's pinned nodes), collected from the files that hold them.
# Both share one native build cache, so a C++ program compiles once.
# `pytest -q` alone runs everything in one process, as before.
# --durations: every log, CI's included, names the slowest tests (the suite's budget is
# 15 min on the slowest machine seen).
LANES ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
WHOLE_MACHINE_FILES = $(shell grep -rl --include='test_*.py' 'mark.whole_machine' tests)

test: $(STAMP) browser native-deps docs
	$(VENV)/bin/ruff check src tests benchmarks docs conftest.py
	$(VENV)/bin/lint-imports
	cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && \
	$(PY) -m pytest -q -n $(LANES) --dist loadscope -m 'not whole_machine' \
		--native-cache="$$cache" --durations=30 && \
	$(PY) -m pytest -q -m whole_machine --native-cache="$$cache" --durations=10 \
		$(WHOLE_MACHINE_FILES)

# The docs site, into site/: MkDocs with every warning an error (a broken link, a page left
# out of the nav); the CLI reference and the backend table are generated from the code as
# it builds (docs/reference/generate.py). The two variables only quiet the theme's and
# MkDocs' banners about their own futures.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --quiet

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
