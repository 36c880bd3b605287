# The README's two commands. Both bootstrap .venv from nothing but python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml plugins/ingest/pyproject.toml plugins/ship/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]' -e plugins/ingest -e plugins/ship
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m framework.demo

lint: $(STAMP)
	$(BIN)/ruff check framework plugins tests bench
	$(BIN)/ruff format --check framework plugins tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: lint typecheck pytest

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
