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

.PHONY: all venv bwrap demo test test-slow bench clean

all: test

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -c constraints.txt -e '.[train,adapters,dev,bio]' --config-settings editable_mode=compat
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

demo: venv
	$(VENV)/bin/medagentgym demo

test: venv
	$(PY) -m pytest -q

test-slow: venv
	$(PY) -m pytest -q -m slow

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

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
