"""`make demo` in a clean copy of the repository, as a newcomer runs it.

The copy is a `git clone` of the working tree's HEAD (committed work only, like a fresh
clone). Two honest shortcuts keep the test from reinstalling everything:

- its ``.venv`` is a symlink to the virtualenv running this test, and make is told
  (``-o .venv/.installed``) not to remake the install stamp (a clone's pyproject files
  are newer than the stamp, and reinstalling would repoint the shared editable
  install at the temporary clone);
- ``PYTHONPATH`` names the clone and its plugins, so every process of the demo imports
  the clone's code, not the code the shared venv's editable install points at.

The default demo port 8800 is held by this test while the demo runs (a busy port must
not matter any more). Every process the demo starts inherits a marker in its
environment; after the run none may be left, and the ports it printed must be closed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.fixtures import procs
from tests.paths import REPO

MARK = "FRAMEWORK_DEMO_TEST_MARK"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("fresh") / "repo"
    procs.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(target)],
        check=True,
        capture_output=True,
    )
    (target / ".venv").symlink_to(Path(sys.prefix))
    return target


@contextlib.contextmanager
def occupied(port: int) -> Iterator[None]:
    """Hold the loopback port (a listening socket), or leave it to whoever holds it."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
    try:
        yield
    finally:
        sock.close()


def demo_env(clone: Path, mark: str, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DEMO_PORT", "FRAMEWORK_HOME")}
    env["TMPDIR"] = str(tmp)  # the demo keeps its folder for the user; here pytest cleans it
    paths = [clone, clone / "plugins" / "ship", clone / "plugins" / "ingest"]
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env[MARK] = mark
    env["PYTHONUNBUFFERED"] = "1"
    return env


def make_demo(clone: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return procs.popen(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "demo"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group, so the Ctrl-C test can signal it alone
        # Ctrl-C as a terminal gives it: a runner started in the background by a shell
        # without job control ignores SIGINT, and every child would inherit that
        preexec_fn=_ctrl_c_default,
    )


def _ctrl_c_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def marked_processes(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARK) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def children() -> set[psutil.Process]:
    return set(psutil.Process().children(recursive=True))


def new_children(before: set[psutil.Process]) -> list[psutil.Process]:
    """Children of this test started since ``before`` (other tests' servers may run)."""
    found = []
    for proc in children() - before:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone while we looked: fine
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def found(pattern: str, output: str) -> str:
    match = re.search(pattern, output)
    assert match, output
    return match.group(1)


def summary(output: str) -> dict[str, str]:
    """The lines of the final table: name (two spaces or more) value."""
    tail = output.split("\n== summary\n", 1)[1]
    rows = {}
    for line in tail.splitlines():
        found = re.match(r"^(\S.*?)\s{2,}(.*)$", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


@pytest.mark.kill
def test_make_demo_on_an_occupied_default_port(clone: Path, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    before = children()
    with occupied(8800):
        proc = make_demo(clone, demo_env(clone, mark, tmp_path))
        out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    site_port = int(found(r"demo site:\s+http://127\.0\.0\.1:(\d+)/cases", out))
    ingest_port = int(found(r"ingest endpoint: http://127\.0\.0\.1:(\d+)", out))
    assert site_port != 8800
    # The demo ran on a copy of the job that names the port the site really got.
    folder = Path(found(r"demo folder: (\S+)", out))
    assert (folder / "projects" / "demo" / "job.yaml").read_text().count(f":{site_port}/") == 1

    rows = summary(out)
    killed = re.fullmatch(
        r"(\d+) requests, then SIGKILL at (\d+) rows ok", rows["crawl 1 (killed)"]
    )
    assert killed, rows
    resumed = re.fullmatch(
        r"(\d+) requests; ok pages fetched again: (\d+)", rows["crawl 2 (resumed)"]
    )
    assert resumed, rows
    pages = re.fullmatch(r"(\d+) ok, (\d+) in error, (\d+) pending", rows["pages"])
    assert pages, rows
    ok, errors, pending = map(int, pages.groups())
    # Interrupted part-way, then resumed to the end without fetching an ok page twice.
    assert 0 < int(killed[2]) < ok
    assert int(resumed[1]) > 0
    assert int(resumed[2]) == 0
    assert pending == 0
    assert errors == 3
    items = re.fullmatch(r"(\d+) complete, (\d+) incomplete", rows["items"])
    assert items, rows
    complete = int(items[1])
    assert complete == 69
    assert rows["shipped"] == f"{complete} ({complete} accepted)"
    assert rows["duplicates avoided"] == f"{complete} skipped by the re-ship, 0 sent again"
    workspace = Path(rows["workspace"])
    assert rows["URL log"] == str(workspace / "urls.jsonl")
    assert (workspace / "urls.jsonl").is_file()
    assert (workspace / "ship-log.jsonl").is_file()
    assert "$ framework status demo" in out
    assert "unfinished" in out

    assert new_children(before) == []
    assert marked_processes(mark) == []  # also what was orphaned (reparented to init)
    assert port_closed(site_port)
    assert port_closed(ingest_port)


@pytest.mark.kill
def test_ctrl_c_stops_every_process_of_the_demo(clone: Path, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    before = children()
    proc = make_demo(clone, demo_env(clone, mark, tmp_path))
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("$ framework crawl demo"):
            break
    else:
        pytest.fail("".join(seen))
    # The crawl, the ingest server and the site are all up: Ctrl-C as a terminal sends
    # it, to the foreground process group (make and the demo; the demo's children have
    # groups of their own and must be stopped by the demo).
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    out = "".join(seen) + rest
    assert proc.returncode != 0, out
    assert "interrupted; stopping what it started" in out
    assert new_children(before) == []
    assert marked_processes(mark) == []
    site_port = int(found(r"demo site:\s+http://127\.0\.0\.1:(\d+)/cases", out))
    assert port_closed(site_port)
