"""Root of the test suite. Fixture modules live in tests/fixtures/ (one per part:
the fixture site, the ingest server, workspaces) and are all registered here, so
each part's fixtures stay in its own file."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = sorted(
    f"tests.fixtures.{p.stem}"
    for p in (Path(__file__).parent / "fixtures").glob("*.py")
    if p.stem != "__init__"
)
