# driftbus — the two commands that matter:
#   make up     run driftbus on a local, self-started stack (NATS + kube-apiserver + etcd)
#   make test   everything CI checks: lint, types, import contracts, schemas, tests
# Everything is installed by these rules: uv (from PyPI) into .tools/, the locked Python
# dependencies into .venv/, the Go-built servers into ~/.cache/driftbus/bin/.

PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .tools/uv/bin/uv
VENV := .venv
BIN := $(VENV)/bin
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Bytecode compiled at install: every service a test starts is a fresh python process, and under
# PYTHONDONTWRITEBYTECODE (set in many container images) each would compile its imports again.
export UV_COMPILE_BYTECODE := 1

.PHONY: test up down lint unit integration assets browser deps bench fmt schemas clean

$(UV):
	$(PYTHON) -m venv .tools/uv
	.tools/uv/bin/pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

$(VENV)/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --locked --quiet
	@touch $@

deps: $(VENV)/.synced

# Builds kube-apiserver, kubectl, etcd and nats-server from pinned Go modules once (progress is
# shown; a cold build takes ~10-25 min on 2 cores), then reuses the cache.
assets: deps
	$(BIN)/python -m services.controlplane.assets ensure

lint: deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m schemas.generate --check

# The status page's tests drive a real headless Chromium: Debian's package (no browser download
# from outside the package mirrors). Needs root the first time; present already, nothing happens.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing Debian's chromium for the UI tests (marker ui) …"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends chromium >/dev/null; }

# Three pytest-xdist workers on two cores (the tests wait on servers much of the time), each with
# its own etcd + kube-apiserver + nats-server; a file's tests stay on one worker, the longest
# files are handed out first (tests/conftest.py). The services a test starts are forked warm
# (harness/warm.py). A clean clone's `make test` took 21:42 here on 2026-11-30 (31:23 before warm
# starts), lint included.
test: lint assets browser
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=30

unit: deps
	$(BIN)/pytest tests/unit

up: assets
	$(BIN)/driftbus up

bench: assets
	$(BIN)/python -m bench $(SCENARIOS)

fmt: deps
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

schemas: deps
	$(BIN)/python -m schemas.generate
	$(BIN)/python -m services.cli.docs

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
