"""Where things are, for tests at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: specs/, cassettes/, fixtures/
REPO = TESTS.parent
