"""A Scrapy user's habits work, through the real command lines.

- `framework new x` in an empty folder leaves what `scrapy crawl x` (which it suggests)
  needs, and `scrapy crawl x` then crawls;
- `scrapy crawl <job> -s FRAMEWORK_MAX_REQUESTS=5` says in its log why it stopped
  (Scrapy's own exit code stays 0; `framework crawl --max-requests 5` exits 3);
- the README's table names every option of `framework crawl`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from framework.cli.crawl import crawl
from framework.demo.site import DemoSite
from tests.fixtures import procs
from tests.paths import REPO

BIN = Path(sys.executable).parent


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEWORK_")}
    out["PATH"] = f"{BIN}{os.pathsep}{out.get('PATH', '')}"
    return out


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return procs.run(
        args, cwd=cwd, env=env(), capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def site() -> object:
    with DemoSite(cases=12) as s:
        yield s


@pytest.mark.process
def test_new_in_an_empty_folder_then_scrapy_crawl(tmp_path: Path, site: DemoSite) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    made = run(["framework", "new", "x", "--start-url", f"{site.url}/cases"], folder)
    assert made.returncode == 0, made.stderr
    assert "scrapy crawl x" in made.stdout
    assert (folder / "scrapy.cfg").is_file()
    assert "framework.scrapy_settings" in (folder / "scrapy.cfg").read_text()
    listed = run(["scrapy", "list"], folder)
    assert listed.stdout.split() == ["x"], listed.stderr
    crawled = run(["scrapy", "crawl", "x"], folder)
    assert crawled.returncode == 0, crawled.stderr
    assert "job x closed" in crawled.stderr
    assert (folder / "var" / "x" / "state.sqlite").is_file()
    assert (folder / "var" / "x" / "urls.jsonl").read_text().count('"outcome":"ok"') > 1

    # A second job finds the scrapy.cfg there and leaves it alone.
    (folder / "scrapy.cfg").write_text((folder / "scrapy.cfg").read_text() + "# mine\n")
    again = run(["framework", "new", "y"], folder)
    assert again.returncode == 0, again.stderr
    assert "wrote scrapy.cfg" not in again.stdout
    assert (folder / "scrapy.cfg").read_text().endswith("# mine\n")


def project(tmp_path: Path, site: DemoSite) -> Path:
    root = tmp_path / "proj"
    (root / "projects" / "demo").mkdir(parents=True)
    (root / "scrapy.cfg").write_text((REPO / "scrapy.cfg").read_text())
    spec = (REPO / "projects" / "demo" / "job.yaml").read_text()
    (root / "projects" / "demo" / "job.yaml").write_text(
        spec.replace("http://127.0.0.1:8800", site.url)
    )
    return root


@pytest.mark.process
def test_max_requests_says_why_it_stopped(tmp_path: Path, site: DemoSite) -> None:
    root = project(tmp_path, site)
    done = run(["scrapy", "crawl", "demo", "-s", "FRAMEWORK_MAX_REQUESTS=5"], root)
    assert done.returncode == 0, done.stderr  # Scrapy's command line: its own exit codes
    assert re.search(
        r"INFO: stopping: FRAMEWORK_MAX_REQUESTS=5 requests sent \(--max-requests\); "
        r"the rows not fetched stay pending",
        done.stderr,
    ), done.stderr
    assert done.stderr.count("stopping: FRAMEWORK_MAX_REQUESTS") == 1
    ours = run(["framework", "crawl", "demo", "--max-requests", "5"], root)
    assert ours.returncode == 3, ours.stderr
    assert "stopping: FRAMEWORK_MAX_REQUESTS=5" in ours.stderr


def test_readme_table_names_every_crawl_option() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("| `framework crawl` | `scrapy crawl` |", 1)[1].split("\n\n", 1)[0]
    for param in crawl.params:
        flags = [f for f in param.opts if f.startswith("--")]
        if flags:
            assert f"`{flags[0]}" in table, f"{flags[0]} missing from the README's table"
    assert "`-a fresh=1`" in table
    assert "`-s FRAMEWORK_MAX_REQUESTS=N`" in table
