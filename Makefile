# effectagent — every target bootstraps what it needs; nothing is installed by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install sysdeps test test-thorough lint typecheck imports pytest demo bench bench-peers mutate clean

# The virtualenv is (re)built whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests need: bubblewrap (the sandbox), chromium and its driver (the serve
# console's browser test), postgresql (the tests start a throwaway cluster of their own; the
# package's own cluster is not used), nodejs and npm (the console script's tests run it; the MCP
# tests install the reference server with npm), tmux (the terminal tests read the screen through
# it). Installed only when missing, in one apt run; needs root or sudo.
sysdeps:
	@missing=; \
	  command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	  command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	  command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	  command -v tmux >/dev/null 2>&1 || missing="$$missing tmux"; \
	  [ -z "$$missing" ] || { \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# The suite runs on the reproducible "ci" hypothesis profile (derandomized, no example database)
# unless HYPOTHESIS_PROFILE says otherwise, in PYTEST_WORKERS worker processes (pytest-xdist; each
# test file on one worker, so a module's shared fixtures are made once; 0: in this process alone).
PYTEST_WORKERS ?= 2
pytest: $(STAMP) sysdeps
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test: lint typecheck imports pytest

# The same suite with ten times the examples, drawn at random (not reproducible: for hunting).
test-thorough: $(STAMP) sysdeps
	HYPOTHESIS_PROFILE=thorough $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

demo: $(STAMP) sysdeps
	$(BIN)/python -m examples.demo

# peers.py is separate (make bench-peers): it installs two other frameworks and takes minutes.
# parked.py runs here with 10,000 runs (--quick), in bench-peers with 100,000; soak.py
# here with --quick (its full soak, 100,000 runs per storage, takes many minutes: run it by hand);
# durable.py with --quick (2,000 recoveries instead of 10,000); serve.py with --quick (a fifth of
# its 2,000 submissions and 200 event-stream clients); scale_out.py with --quick (60 submissions,
# one round, one lease).
bench: $(STAMP) sysdeps
	@for b in benchmarks/*.py; do \
	  case $$b in */_*|*/peers.py) continue;; esac; \
	  args=; case $$b in */parked.py|*/soak.py|*/durable.py|*/serve.py|*/scale_out.py) args=--quick;; esac; \
	  echo "== $$b"; $(BIN)/python $$b $$args || exit 1; done

# effectagent, pydantic-ai and openai-agents on the same four runs (each peer in its own
# virtualenv under .venv-peers/, installed when missing), then 100,000 runs parked at once.
bench-peers: $(STAMP)
	$(BIN)/python benchmarks/peers.py
	$(BIN)/python benchmarks/parked.py

# Mutation testing of the security-critical modules (mutation/modules.toml; not part of `make test`:
# 11-14 minutes on 2 cores). mutmut runs in its own virtualenv, .venv-mutate/, built when missing.
# MUTATE_ARGS picks modules by name (e.g. MUTATE_ARGS="redact budget"); MUTATE_JOBS workers.
MUTATE_VENV := .venv-mutate
MUTATE_STAMP := $(MUTATE_VENV)/.installed
MUTATE_JOBS ?= 2

$(MUTATE_STAMP): pyproject.toml mutation/requirements.txt
	test -x $(MUTATE_VENV)/bin/python || $(PYTHON) -m venv $(MUTATE_VENV)
	$(MUTATE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MUTATE_VENV)/bin/python -m pip install --quiet -e '.[dev]' -r mutation/requirements.txt
	touch $(MUTATE_STAMP)

mutate: $(MUTATE_STAMP)
	$(MUTATE_VENV)/bin/python mutation/run.py --jobs $(MUTATE_JOBS) $(MUTATE_ARGS)

clean:
	rm -rf $(VENV) .venv-mutate .venv-peers .mutate mutants .mypy_cache .pytest_cache .ruff_cache .hypothesis .test-artifacts
