# Two commands for a new user on a fresh Debian machine:
#   make run   - set up, then tune every kernel on the embedded default (local Ray, SQLite)
#   make test  - set up, then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
export XDG_RUNTIME_DIR ?= /tmp

.PHONY: run test setup system-deps lint

setup: system-deps $(VENV)/.installed

system-deps:
	@scripts/install-system-deps

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

run: setup
	$(VENV)/bin/farm tune --all --allow-cpu

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q tests

lint: setup
	$(VENV)/bin/ruff check .
