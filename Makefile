# effectagent — every target bootstraps what it needs; nothing is installed by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install sysdeps test test-thorough lint typecheck imports pytest demo bench clean

# The virtualenv is (re)built whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the sandbox needs (bubblewrap). Installed only when missing; needs root or sudo.
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# The suite runs on the reproducible "ci" hypothesis profile (derandomized, no example database)
# unless HYPOTHESIS_PROFILE says otherwise.
pytest: $(STAMP) sysdeps
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck imports pytest

# The same suite with ten times the examples, drawn at random (not reproducible: for hunting).
test-thorough: $(STAMP) sysdeps
	HYPOTHESIS_PROFILE=thorough $(BIN)/pytest $(PYTEST_ARGS)

demo: $(STAMP) sysdeps
	$(BIN)/python -m examples.demo

bench: $(STAMP) sysdeps
	@for b in benchmarks/*.py; do \
	  case $$b in */_*) continue;; esac; \
	  echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
