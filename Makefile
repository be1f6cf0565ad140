# mario-impala: every command a user runs. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# python3.13 from PATH, else pyenv's, else the usual system places.
PYTHON313 ?= $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13 /usr/local/bin/python3.13 /usr/bin/python3.13; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1 && { echo $$p; break; }; done)
STAMP := $(VENV)/.installed

.PHONY: install test test-fast lint bench

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON313)" || { echo "error: python3.13 not found; install it (pyenv install 3.13) or pass PYTHON313=/path/to/python3.13" >&2; exit 1; }
	test -x $(PY) || $(PYTHON313) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) scripts/bench.py
