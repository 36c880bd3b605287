# The README's two commands. Both bootstrap .venv from nothing but python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint typecheck docs reference pytest bench clean

$(STAMP): pyproject.toml plugins/ingest/pyproject.toml plugins/ship/pyproject.toml plugins/playwright/pyproject.toml \
		plugins/dashboard/pyproject.toml
	@echo '==> one-time setup: creating $(VENV) and installing framework, its plugins and test tools into it'
	@echo '    (a minute or two on a fresh clone; later runs skip this step)'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo '==> installing framework and the ingest and ship plugins (editable), with test tools'
	$(BIN)/python -m pip install --quiet -e '.[test]' -e plugins/ingest -e plugins/ship \
		-e plugins/playwright -e plugins/dashboard
	touch $(STAMP)
	@echo '==> setup done: activate it with `. $(VENV)/bin/activate` to put `framework` on your PATH'

# DEMO_PORT=N serves the demo site on that port (default: a free one).
demo: $(STAMP)
	$(BIN)/python -m framework.demo

lint: $(STAMP)
	$(BIN)/ruff check framework plugins tests bench
	$(BIN)/ruff format --check framework plugins tests bench
	$(BIN)/lint-imports  # the layers and the plugins' public door ([tool.importlinter])

typecheck: $(STAMP)
	$(BIN)/mypy

# Workers for pytest-xdist. The whole suite: more than twice the cores, because most of
# it waits (on sites, servers, child processes and kills) rather than computes (5 on
# 2 cores used 150% of them; 4 left more idle and took longer; see docs/testing.md).
# The fast loop computes: twice the cores.
WORKERS ?= 5
CHECK_WORKERS ?= 4
# The fast loop: the tests that need no child process, database or browser.
FAST := not (process or kill or pg or browser or slow)

# The whole suite with branch coverage; the floor is fail_under in pyproject.toml. The
# slowest tests are listed at the end: the loop's budget, visible on every run.
pytest: $(STAMP)
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal --durations=15 --cov --cov-report=term:skip-covered $(PYTEST_ARGS)

test: lint typecheck docs pytest

# The docs as a static site in site/ (mkdocs.yml): strict, so a broken link, a missing
# anchor or a page left out of the nav fails; the generated reference must be current;
# and no page may load a script or style from the internet (the site works offline).
docs: $(STAMP)
	$(BIN)/python -m framework.docs_gen --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@! grep -rlE '(src|href)="https?://[^"]*\.(js|css)|src="https?://' site --include='*.html' \
		|| (echo 'a page of site/ loads something from the internet' >&2; false)

# Regenerate docs/reference/ from the code (spec models, commands, settings).
reference: $(STAMP)
	$(BIN)/python -m framework.docs_gen

# lint, types and the in-process tests, in about a minute (no PostgreSQL even if set)
check: lint typecheck
	env -u FRAMEWORK_TEST_PG -u FRAMEWORK_REQUIRE_PG -u CI -u FRAMEWORK_REQUIRE_BROWSER \
		$(BIN)/python -m pytest -n $(CHECK_WORKERS) --dist worksteal --forbid-children -m '$(FAST)' $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var site .mypy_cache .ruff_cache .pytest_cache
