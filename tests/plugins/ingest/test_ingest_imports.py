"""The ingest door never reads a crawl workspace: no module of it imports the workspace
(or crawl) package, not even for redaction (framework.redact)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# a fresh interpreter: this test process has long imported the workspace for others
_PROBE = """
import importlib, pkgutil, sys
import framework_ingest
for m in pkgutil.iter_modules(framework_ingest.__path__):
    importlib.import_module("framework_ingest." + m.name)
print(sorted(n for n in sys.modules if n.startswith(("framework.workspace", "framework.crawl"))))
"""


@pytest.mark.process
def test_no_door_module_imports_the_workspace_or_the_crawl() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
