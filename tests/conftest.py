"""Root of the test suite. Fixture modules live in tests/fixtures/ (one per part:
the fixture site, the ingest server, workspaces) and are all registered here, so
each part's fixtures stay in its own file."""

from __future__ import annotations

from pathlib import Path

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
