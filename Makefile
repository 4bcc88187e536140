# The two commands of the README: `make demo` (train, export, serve, ask) and `make test`.
#
# The venv is made with the first of $(PYTHON_CANDIDATES) whose version is in
# $(SUPPORTED_PYTHON) (pyproject.toml's requires-python; a test keeps the two equal), or with
# `make PYTHON=/path/to/python3.x`, which must be in that range too.
PYTHON_MIN := 3.11
PYTHON_BELOW := 3.13
SUPPORTED_PYTHON := >=$(PYTHON_MIN),<$(PYTHON_BELOW)
PYTHON_CANDIDATES := python3.12 python3.11 python3
# Exits 0 if the interpreter named by the shell variable $$python is in the supported range.
in_range = "$$python" -c 'import sys; version = lambda text: tuple(map(int, text.split("."))); \
	sys.exit(not version("$(PYTHON_MIN)") <= sys.version_info[:2] < version("$(PYTHON_BELOW)"))' \
	>/dev/null 2>&1

ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for python in $(PYTHON_CANDIDATES); do \
	if $(in_range); then echo "$$python"; break; fi; done)
endif
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test lint

$(VENV)/.installed: pyproject.toml requirements.txt
	@if [ -z "$(PYTHON)" ]; then \
		echo "make: no Python $(SUPPORTED_PYTHON) found (tried: $(PYTHON_CANDIDATES));" \
			"install one, or name it: make PYTHON=/path/to/python3.11" >&2; \
		exit 1; \
	fi; \
	python="$(PYTHON)"; \
	if ! $(in_range); then \
		echo "make: $(PYTHON) is Python" \
			"$$("$(PYTHON)" -c 'import platform; print(platform.python_version())' 2>&1)," \
			"not $(SUPPORTED_PYTHON); name another: make PYTHON=/path/to/python3.11" >&2; \
		exit 1; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m keras_transformer demo

test: venv
	$(PY) -m pytest -q --durations=25

lint: venv
	$(VENV)/bin/ruff check keras_transformer serving tests bench notebooks
