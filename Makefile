# The two commands of the README: `make demo` (train, export, serve, ask) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test lint

$(VENV)/.installed: pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m keras_transformer demo

test: venv
	$(PY) -m pytest -q

lint: venv
	$(VENV)/bin/ruff check keras_transformer serving tests bench notebooks
