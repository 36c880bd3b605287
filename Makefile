# The README's two commands. Both bootstrap .venv from nothing but python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml plugins/ingest/pyproject.toml plugins/ship/pyproject.toml plugins/playwright/pyproject.toml
	@echo '==> one-time setup: creating $(VENV) and installing framework, its plugins and test tools into it'
	@echo '    (a minute or two on a fresh clone; later runs skip this step)'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo '==> installing framework and the ingest and ship plugins (editable), with test tools'
	$(BIN)/python -m pip install --quiet -e '.[test]' -e plugins/ingest -e plugins/ship \
		-e plugins/playwright
	touch $(STAMP)
	@echo '==> setup done: activate it with `. $(VENV)/bin/activate` to put `framework` on your PATH'

# DEMO_PORT=N serves the demo site on that port (default: a free one).
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
