# Two commands for a new user on a fresh Debian machine:
#   make run   - set up, then tune every kernel on the embedded default (local Ray, SQLite)
#   make test  - set up, then run the test suite (make test-fast: without the slow, PostgreSQL and browser tests)
VENV ?= .venv
PY := $(VENV)/bin/python
export XDG_RUNTIME_DIR ?= /tmp

.PHONY: run test test-fast setup system-deps test-deps lint

setup: system-deps $(VENV)/.installed

# Vulkan (lavapipe when there is no GPU driver) for everyone; PostgreSQL and chromium only for the tests.
system-deps:
	@FARM_TEST_DEPS=0 scripts/install-system-deps

test-deps:
	@FARM_TEST_DEPS=1 scripts/install-system-deps

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# --allow-cpu: without a GPU the farm tunes on lavapipe (small sizes, capped budget, with a notice).
run: setup
	$(VENV)/bin/farm tune --all --allow-cpu
	@echo "(farm is in $(VENV)/bin: \`source $(VENV)/bin/activate\` once per shell, then type the commands above)"

test: test-deps setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q tests

# The suite without its slow, PostgreSQL and browser tests: what to run while you work.
test-fast: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m 'not slow and not postgres and not browser' tests

lint: setup
	$(VENV)/bin/ruff check .
