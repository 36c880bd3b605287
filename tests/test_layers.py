"""The import contracts of pyproject.toml ([tool.importlinter], run by `make lint`): the
real tree keeps them, and a deliberate upward import breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PLUGINS = ("ingest", "ship", "playwright", "dashboard")

pytestmark = [
    pytest.mark.process,  # lint-imports runs as the command `make lint` runs
    pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter not installed"),
]


def lint_imports(cwd: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: a copy of the tree shadows the editable installs
    env = {"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": ":".join(map(str, pythonpath))}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_keeps_the_contracts() -> None:
    result = lint_imports(ROOT, [])
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_them(tmp_path: Path) -> None:
    """extract/tree.py importing the crawl: above it in the layers, and extract is pure."""
    shutil.copytree(ROOT / "framework", tmp_path / "framework", ignore=_caches)
    for name in PLUGINS:
        package = f"framework_{name}"
        shutil.copytree(ROOT / "plugins" / name / package, tmp_path / package, ignore=_caches)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    tree = tmp_path / "framework" / "extract" / "tree.py"
    tree.write_text(tree.read_text() + "\nimport framework.crawl.verdict  # upward, on purpose\n")

    result = lint_imports(tmp_path, [tmp_path])

    assert result.returncode != 0, result.stdout
    assert "framework.extract.tree -> framework.crawl.verdict" in result.stdout
    assert "extract is pure" in result.stdout
    assert "BROKEN" in result.stdout


def _caches(directory: str, names: list[str]) -> list[str]:
    return [name for name in names if name == "__pycache__" or name.endswith(".egg-info")]
