"""Root of the test suite. Fixture modules live in tests/fixtures/ (one per part:
the fixture site, the ingest server, workspaces, child processes) and are all
registered here, so each part's fixtures stay in its own file.

Markers say what a test needs beyond the pytest process (``--strict-markers``):
``process`` starts a child process, ``kill`` signals or kills one on purpose, ``pg``
needs the PostgreSQL server, ``browser`` the Chromium browser, ``slow`` takes more than
a few seconds. ``make check`` runs the tests with none of them, with
``--forbid-children``: a test there that starts a child fails, naming the marker it
lacks, so the fast loop cannot silently grow slow.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

pytest_plugins = sorted(
    f"tests.fixtures.{p.stem}"
    for p in (Path(__file__).parent / "fixtures").glob("*.py")
    if p.stem != "__init__"
)

# Property tests: no per-example deadline (a loaded 2-core machine would make
# Hypothesis call a slow example flaky) and a fixed, example-database-free run, so a
# failure replays the same way in CI and locally.
settings.register_profile("framework", deadline=None, derandomize=True, database=None)
settings.load_profile("framework")

# Scheduled first, so that the longest tests start at once on the workers and the
# short ones fill in around them (xdist hands tests out in collection order).
_FIRST = ("slow", "kill", "browser", "process")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--forbid-children",
        action="store_true",
        help="fail a test that starts a child process (the fast loop: make check)",
    )


_REAL_EXECUTE_CHILD = subprocess.Popen._execute_child  # type: ignore[attr-defined]


def _refuse_children(self: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
    pytest.fail(
        f"this test starts a child process ({str(args)[:80]}): mark it "
        "@pytest.mark.process (or kill), or keep it out of the fast loop",
        pytrace=False,
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    # only around the test itself: pytest-xdist starts its workers as children
    forbid = item.config.getoption("--forbid-children")
    if forbid:
        subprocess.Popen._execute_child = _refuse_children  # type: ignore[attr-defined]
    try:
        return (yield)
    finally:
        if forbid:
            subprocess.Popen._execute_child = _REAL_EXECUTE_CHILD  # type: ignore[attr-defined]


def _is_pg(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    values = callspec.params.values() if callspec is not None else ()
    return any(v in ("postgres", "postgresql") for v in values if isinstance(v, str))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_pg(item):
            item.add_marker(pytest.mark.pg)

    def rank(item: pytest.Item) -> int:
        for n, name in enumerate(_FIRST):
            if item.get_closest_marker(name) is not None:
                return n
        return len(_FIRST)

    items.sort(key=rank)  # stable: within a rank, the files' own order
