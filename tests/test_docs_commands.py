"""Every command in README.md and docs/**/*.md runs as written.

How a document marks its shell blocks (an HTML comment on the line right before the
opening fence; rendered Markdown does not show it):

- ``<!-- runnable -->``: every command of the block is run by this test and must exit 0.
  Options inside the comment: ``exits=0,4`` (the exit codes every command of the block
  may end with) and ``after=crawl`` (the demo job is crawled once before the file's
  first such block, for blocks that need a workspace to look at). A comment that
  starts with ``exits N`` (``framework crawl demo  # exits 4: ...``) sets that one
  command's expected exit code.
  ``needs=chromium`` (the playwright plugin and a Chromium) and ``needs=postgres`` (a
  PostgreSQL server, from ``FRAMEWORK_TEST_PG``) name what a block needs besides the
  repository: with it missing, the blocks before it run and the file skips there,
  unless that is required (``CI=true`` or ``FRAMEWORK_REQUIRE_BROWSER=1`` for Chromium,
  ``FRAMEWORK_REQUIRE_PG=1`` for PostgreSQL, as for the browser and PostgreSQL tests),
  where it fails before any block runs.
- ``<!-- illustrative: <reason> -->``: not run; the reason is required (a synopsis, a
  crontab line, a command that needs a real remote endpoint or minutes of time, ...).
- ``<!-- output -->`` on a block right after a runnable one: what those commands print.
  Each of its lines must be part of a line of their output (stdout and stderr together),
  in the order written; a line ``...`` stands for any lines, and blank lines are
  ignored. So an excerpt shows the stable part of the output (no timings, no counts
  that depend on when a crawl was killed) and still fails when the product says
  something else.
- ``<!-- file: PATH -->`` on any block: its text is written to PATH (relative to the
  repository root) when the blocks before it have run, as a reader would paste it into
  that file (a tutorial's spec, and the spec again after a fix).

A shell block is a fenced block whose info string is ``sh``, ``shell``, ``bash`` or
``console``, or an unlabelled one whose first line starts with a command this project
documents (``framework``, ``scrapy``, ``make``, ``.venv/bin/...``, ``python``, ``pip``,
``cd``, ``*/`` as in a crontab, possibly after ``NAME=value`` assignments). Every shell
block of every file must carry one of the two markers (other blocks, such as a command's
output, may be marked illustrative too, never runnable).

How the commands run: each file gets its own copy of the working tree (no ``.git``,
``var`` or caches; ``.venv`` is a symlink to the virtualenv running this test, whose
``bin`` comes first on ``PATH``). Blocks run in document order, one command at a time,
from the copy's root, so state carries over from block to block as it would for a
reader typing them. A plain ``framework``, ``scrapy`` or ``python -m`` command (no
pipe, redirection, quote or glob) is forked from the test's fork server
(tests/fixtures/procs.py) with the copy's working directory and environment; anything
else runs through ``bash -c``. A command ending in ``&`` is started in the
background (its own process group, stopped at the end of the file) and, when it names a
port, waited for until that port accepts connections. ``export NAME=value`` sets NAME
for the file's later commands, as it would in the reader's shell.

The documents name fixed ports (the demo site on 8800, the ingest endpoint on 8700, and
whatever port a command serves on with ``--port N``, such as a guide's fixture site or
receiving endpoint); a test may not rely on fixed ports, so each file's ports are mapped
to free ones, in its commands, its ``file:`` blocks and the copy's
``projects/demo/job.yaml``, and that is the only rewriting a command gets. When no
command of a file serves the demo site or the ingest endpoint itself, this test serves
them on the mapped ports (the fixture site in-process on port 0, the reference ingest
server as a child on port 0 whose real port is read back). A file with a
``needs=postgres`` block names the reader's database as ``postgresql://crawler@db.internal/crawls``;
that URL is mapped to a database created for the file on the ``FRAMEWORK_TEST_PG``
server (dropped at its end), so every such file starts on an empty database.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from framework.demo.site import DemoSite
from tests.fixtures import procs
from tests.paths import REPO

# docs/ recursively: the tutorial, the guides and the generated reference alike
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SITE_PORT, INGEST_PORT = 8800, 8700
# The reader's PostgreSQL database as the documents name it (needs=postgres).
DOC_DATABASE = "postgresql://crawler@db.internal/crawls"
NEEDS = ("chromium", "postgres")
PG_ENV = "FRAMEWORK_TEST_PG"  # a server the file's own database is created on
SHELL_INFOS = {"sh", "shell", "bash", "console"}
COMMAND_START = re.compile(
    r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
    r"(?:framework|scrapy|make|python3?|pip|cd|\.venv/bin/\S+|\*/\d+)(?:\s|$)"
)
FENCE = re.compile(r"^(\s*)(```+)(.*)$")
MARKER = re.compile(r"^\s*<!--\s*(runnable|illustrative|output|file)\b(.*?)-->\s*$")
COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "var",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "*.egg-info",
)

pytestmark = pytest.mark.timeout(600)


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    info: str
    body: list[str]
    marker: str | None  # "runnable", "illustrative", "output", "file" or None
    options: str = ""

    @property
    def where(self) -> str:
        shown = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{shown}:{self.line}"

    @property
    def is_shell(self) -> bool:
        if self.info.split()[:1] and self.info.split()[0] in SHELL_INFOS:
            return True
        first = next((ln.strip() for ln in self.body if ln.strip()), "")
        return not self.info and bool(COMMAND_START.match(first))

    def exits(self) -> set[int]:
        found = re.search(r"\bexits=([\d,]+)", self.options)
        return {int(n) for n in found.group(1).split(",")} if found else {0}

    @property
    def after_crawl(self) -> bool:
        return "after=crawl" in self.options

    @property
    def needs(self) -> set[str]:
        """What the block needs besides the repository (``needs=chromium,postgres``)."""
        found = re.search(r"\bneeds=([\w,]+)", self.options)
        return set(found.group(1).split(",")) if found else set()

    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, blank and comment lines dropped."""
        out: list[str] = []
        pending = ""
        for raw in self.body:
            line = raw.strip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            if line and not line.startswith("#"):
                out.append(line)
        return out


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, ticks, info = opening.groups()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{ticks}\s*$", lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        assert j < len(lines), f"{path}:{i + 1}: unclosed fence"
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        found.append(
            Block(
                path,
                i + 1,
                info.strip(),
                body,
                marker.group(1) if marker else None,
                marker.group(2).strip(" :") if marker else "",
            )
        )
        i = j + 1
    return found


def test_every_file_is_covered() -> None:
    """Each shell block of every file says whether it runs; illustrative ones say why."""
    assert (REPO / "README.md") in DOC_FILES
    assert len(DOC_FILES) > 1
    problems = []
    for path in DOC_FILES:
        for block in blocks_of(path):
            if block.marker is None and block.is_shell:
                problems.append(
                    f"{block.where}: a shell block marked neither runnable nor illustrative"
                )
            if block.marker == "illustrative" and not block.options:
                problems.append(f"{block.where}: illustrative without a reason")
            # Marking output illustrative is harmless; running YAML or output is not.
            if block.marker == "runnable" and not block.is_shell:
                problems.append(f"{block.where}: marked runnable but not a shell block")
            if block.marker == "runnable" and block.needs - set(NEEDS):
                problems.append(f"{block.where}: needs one of {', '.join(NEEDS)}")
        problems += excerpt_problems(blocks_of(path))
    assert problems == []


def excerpt_problems(blocks: list[Block]) -> list[str]:
    """An output excerpt must follow a runnable block (else there is nothing to check
    it against); a file block must name a relative path inside the repository."""
    problems = []
    previous: Block | None = None
    for block in blocks:
        if block.marker == "output" and (previous is None or previous.marker != "runnable"):
            problems.append(f"{block.where}: an output excerpt not right after a runnable block")
        if block.marker == "file":
            target = Path(block.options)
            if not block.options or target.is_absolute() or ".." in target.parts:
                problems.append(f"{block.where}: a file block needs a relative PATH")
        previous = block
    return problems


def missing_lines(excerpt: list[str], output: str) -> list[str]:
    """The lines of ``excerpt`` not found, in order, each inside a line of ``output``
    (``...`` and blank lines match anything). Empty when the excerpt holds."""
    lines = output.splitlines()
    at = 0
    for i, want in enumerate(excerpt):
        want = want.strip()
        if not want or want == "...":
            continue
        found = next((j for j in range(at, len(lines)) if want in lines[j]), None)
        if found is None:
            return [ln.strip() for ln in excerpt[i:] if ln.strip() not in ("", "...")]
        at = found + 1
    return []


def test_output_excerpts_match_in_order_and_fail_otherwise() -> None:
    output = "cases: finished\n  kind  ok\n  detail  70\nerror: 2 rows in error\n"
    assert missing_lines(["cases: finished", "...", "detail  70", ""], output) == []
    # a line that is not there, a changed word, and the right lines in the wrong order
    assert missing_lines(["detail  71"], output) == ["detail  71"]
    assert missing_lines(["cases: drained"], output) == ["cases: drained"]
    assert missing_lines(["error: 2 rows", "cases: finished"], output) == ["cases: finished"]


def test_output_and_file_blocks_are_checked(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- output -->\n```\nnothing ran before me\n```\n\n"
        "<!-- runnable -->\n```sh\nframework list\n```\n\n"
        "<!-- output -->\n```\ndemo\n```\n\n"
        "<!-- file: projects/x/job.yaml -->\n```yaml\nname: x\n```\n\n"
        "<!-- file: /etc/passwd -->\n```\nroot\n```\n",
        encoding="utf-8",
    )
    blocks = blocks_of(doc)
    assert [b.marker for b in blocks] == ["output", "runnable", "output", "file", "file"]
    assert blocks[3].options == "projects/x/job.yaml"
    assert [p.split(": ", 1)[1] for p in excerpt_problems(blocks)] == [
        "an output excerpt not right after a runnable block",
        "a file block needs a relative PATH",
    ]


def test_the_marker_rules_catch_an_unmarked_block(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```sh\nframework crawl demo\n```\n\n```\nFOO=1 framework ship demo\n```\n\n"
        "<!-- illustrative: a synopsis -->\n```\nframework x [--y]\n```\n\n"
        "```\nprojects/demo/job.yaml:1:1: not a command\n```\n\n"
        "<!-- runnable exits=0,4 after=crawl -->\n```sh\nframework a \\\n  --b\n# c\n```\n\n"
        "<!-- runnable needs=chromium,postgres -->\n```sh\nframework crawl js\n```\n",
        encoding="utf-8",
    )
    blocks = blocks_of(doc)
    assert [(b.is_shell, b.marker) for b in blocks] == [
        (True, None),
        (True, None),
        (True, "illustrative"),
        (False, None),
        (True, "runnable"),
        (True, "runnable"),
    ]
    assert blocks[2].options == "a synopsis"
    assert blocks[4].commands() == ["framework a  --b"]
    assert blocks[4].exits() == {0, 4}
    assert blocks[4].after_crawl
    assert blocks[4].needs == set()
    assert blocks[5].needs == {"chromium", "postgres"}
    assert blocks[5].exits() == {0}


# -- running ------------------------------------------------------------------------


# A command with none of these is one program with its arguments, no shell needed.
SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?~{}\[\]\\'\"]")
ENTRY_POINTS = {
    "framework": [
        sys.executable,
        "-c",
        "import sys; from framework.cli import main; sys.exit(main())",
    ],
    "scrapy": [sys.executable, "-m", "scrapy"],
    "python": [sys.executable],
    "python3": [sys.executable],
}


def direct(command: str) -> list[str] | None:
    """The argv of a plain ``framework``/``scrapy``/``python -m`` command, run through the
    fork server instead of ``bash -c`` and a new interpreter: the program and arguments
    a reader's shell would pass, from the copy's root, with the copy's environment.
    ``None`` for anything that needs a shell (pipes, redirections, globs, quotes)."""
    line = re.sub(r"\s#.*$", "", command).strip()
    if not line or SHELL_SYNTAX.search(line):
        return None
    words = line.split()
    entry = ENTRY_POINTS.get(words[0])
    if entry is None or (words[0].startswith("python") and words[1:2] != ["-m"]):
        return None
    return [*entry, *words[1:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"background command exited {proc.returncode}"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port} after {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return  # reaped already: its group id may belong to someone else by now
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class Sandbox:
    """A copy of the working tree with the documents' ports mapped to free ones (and
    their database to the file's own)."""

    root: Path
    ports: dict[int, int]
    env: dict[str, str]
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)

    def rewrite(self, command: str) -> str:
        for doc_port, port in self.ports.items():
            command = re.sub(rf"(?<!\d){doc_port}(?!\d)", str(port), command)
        for doc_url, url in self.urls.items():  # after the ports: a real URL stays as it is
            command = command.replace(doc_url, url)
        return command

    def write(self, block: Block) -> None:
        """A ``file:`` block: its text into the copy, with the documents' ports mapped."""
        target = self.root / block.options
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.rewrite("\n".join(block.body) + "\n"), encoding="utf-8")

    def run(self, command: str, exits: set[int], where: str) -> str:
        """Run one command; its stdout and stderr (nothing for a background one)."""
        line = self.rewrite(command)
        expected = re.search(r"#\s*exits (\d+)\b", command)
        allowed = {int(expected.group(1))} if expected else exits
        exported = re.match(r"export\s+([A-Za-z_]\w*)=(.*)$", line)
        if exported:  # the reader's shell keeps it for the commands that follow
            words = shlex.split(exported.group(2), comments=True)
            self.env[exported.group(1)] = words[0] if words else ""
            return ""
        if re.search(r"&\s*(#.*)?$", line):
            foreground = line.split("#", 1)[0].rstrip().rstrip("&")
            proc = procs.popen(
                direct(foreground) or ["bash", "-c", foreground],
                cwd=self.root,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.background.append(proc)
            port = re.search(r"--port (\d+)", line)
            if port:
                wait_port(int(port.group(1)), proc)
            return ""
        done = procs.run(
            direct(line) or ["bash", "-c", line],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode in allowed, (
            f"{where}: `{command}` exited {done.returncode}, expected {sorted(allowed)}\n"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )
        return f"{done.stdout}\n{done.stderr}"

    def stop(self) -> None:
        for proc in self.background:
            stop(proc)


@contextlib.contextmanager
def sandbox(tmp_path: Path, commands: list[str], database: str | None = None) -> Iterator[Sandbox]:
    """The file's copy of the tree; ``database``: a fresh database the documents'
    ``DOC_DATABASE`` stands for (needs=postgres)."""
    root = tmp_path / "repo"
    shutil.copytree(REPO, root, ignore=COPY_IGNORE, symlinks=True)
    (root / ".venv").symlink_to(Path(sys.prefix))
    # The reader's environment, not the test run's: no FRAMEWORK_* setting of ours
    # (a workspace, an endpoint), except where this machine keeps its Chromium.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FRAMEWORK_", "DEMO_")) or k == "FRAMEWORK_CHROMIUM"
    }
    env["PATH"] = f"{root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    text = "\n".join(commands)
    own_site = "framework.demo.site" in text
    own_ingest = "ingest serve" in text
    with contextlib.ExitStack() as stack:
        if own_site:
            site_port = free_port()
        else:
            site = stack.enter_context(DemoSite(port=0))
            site_port = int(site.url.rsplit(":", 1)[1])
        box = Sandbox(root, {SITE_PORT: site_port}, env)
        if database is not None:
            # dropped after box.stop (callbacks run last first): no worker holds it then
            box.urls[DOC_DATABASE] = stack.enter_context(fresh_database(database))
        stack.callback(box.stop)
        if own_ingest:
            box.ports[INGEST_PORT] = free_port()
        else:
            box.ports[INGEST_PORT] = serve_ingest(box)
        # any other port a command serves on (a guide's fixture site, its own endpoint)
        for named in re.findall(r"--port (\d+)", text):
            if int(named) not in box.ports and int(named) != 0:
                box.ports[int(named)] = free_port()
        spec = root / "projects" / "demo" / "job.yaml"
        spec.write_text(box.rewrite(spec.read_text(encoding="utf-8")), encoding="utf-8")
        yield box


def serve_ingest(box: Sandbox) -> int:
    log = box.root / "var" / "docs-ingest.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = procs.popen(
            [
                "framework",
                "ingest",
                "serve",
                "--db",
                "sqlite:///var/docs-ingest.sqlite",
                "--port",
                "0",
            ],
            cwd=box.root,
            env=box.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    box.background.append(proc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        assert proc.poll() is None, log.read_text(errors="replace")
        time.sleep(0.05)
    raise AssertionError("the ingest server did not start")


# -- what a block needs besides the repository (needs=) ---------------------------------


def unavailable(need: str) -> str | None:
    """Why ``need`` is not there on this machine, or None when it is."""
    if need == "chromium":
        try:
            from framework_playwright.browser import find_chromium

            find_chromium()
        except Exception as exc:  # the plugin missing (ImportError) or no Chromium
            return f"no playwright plugin or Chromium: {exc}"
        return None
    if need == "postgres":
        if not os.environ.get(PG_ENV):
            return f"{PG_ENV} is unset: no PostgreSQL to run against"
        return None
    raise AssertionError(f"unknown need {need!r}")


def required(need: str) -> bool:
    """Whether a missing ``need`` fails rather than skips, as it does for the browser
    and PostgreSQL tests (tests/plugins/playwright, tests/fixtures/ingest.py)."""
    if need == "chromium":
        return os.environ.get("CI") == "true" or os.environ.get("FRAMEWORK_REQUIRE_BROWSER") == "1"
    return os.environ.get("FRAMEWORK_REQUIRE_PG") == "1"


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new, empty database on the ``server`` URL's server, dropped at the end."""
    import psycopg

    name = f"framework_docs_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(server)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _needs_of(path: Path) -> set[str]:
    return {n for b in blocks_of(path) if b.marker == "runnable" for n in b.needs}


def _marks(path: Path) -> list[pytest.MarkDecorator]:
    """``browser`` and ``pg`` for a file with blocks that need them (make check and
    -m select by them as for any other test)."""
    needs = _needs_of(path)
    return [
        m
        for n, m in (("chromium", pytest.mark.browser), ("postgres", pytest.mark.pg))
        if n in needs
    ]


def test_a_block_that_needs_something_missing_skips_or_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PG_ENV, raising=False)
    monkeypatch.delenv("FRAMEWORK_REQUIRE_PG", raising=False)
    assert unavailable("postgres") == f"{PG_ENV} is unset: no PostgreSQL to run against"
    assert not required("postgres")
    monkeypatch.setenv("FRAMEWORK_REQUIRE_PG", "1")
    assert required("postgres")
    monkeypatch.setenv(PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")
    assert unavailable("postgres") is None
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("FRAMEWORK_REQUIRE_BROWSER", raising=False)
    assert not required("chromium")
    monkeypatch.setenv("FRAMEWORK_REQUIRE_BROWSER", "1")
    assert required("chromium")
    monkeypatch.setenv("FRAMEWORK_CHROMIUM", "/nonexistent/chromium")
    assert unavailable("chromium") is not None  # a wrong path is never passed over
    # the guides that need them are marked so
    assert {"chromium"} <= _needs_of(REPO / "docs" / "guides" / "javascript.md")
    assert {"postgres"} <= _needs_of(REPO / "docs" / "guides" / "postgres.md")


def test_export_sets_later_commands_environment_and_the_database_is_mapped(
    tmp_path: Path,
) -> None:
    real = "postgresql://postgres@127.0.0.1:5432/framework_docs_1"
    box = Sandbox(tmp_path, {SITE_PORT: 41234}, {}, urls={DOC_DATABASE: real})
    line = f"export FRAMEWORK_WORKSPACE='{DOC_DATABASE}?options=-csearch_path%3Dcourts'"
    assert box.run(line, {0}, "here") == ""
    assert box.env == {"FRAMEWORK_WORKSPACE": f"{real}?options=-csearch_path%3Dcourts"}
    # the ports first, then the database: a real URL's own port is never rewritten
    assert box.rewrite(f"psql '{DOC_DATABASE}' # 8800") == f"psql '{real}' # 41234"


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=_marks(p), id=str(p.relative_to(REPO))) for p in DOC_FILES],
)
def test_runnable_blocks_run_as_written(path: Path, tmp_path: Path) -> None:
    runnable = [b for b in blocks_of(path) if b.marker == "runnable"]
    shell = [b for b in blocks_of(path) if b.is_shell]
    # A file is covered when its runnable blocks pass; a file without any has only
    # illustrative shell blocks (test_every_file_is_covered) or none at all.
    if not runnable:
        assert all(b.marker == "illustrative" for b in shell)
        return
    absent = {need: why for need in sorted(_needs_of(path)) if (why := unavailable(need))}
    for need, why in absent.items():
        if required(need):
            pytest.fail(f"{path.relative_to(REPO)} needs {need}, required here: {why}")
    database = os.environ[PG_ENV] if "postgres" in _needs_of(path) - set(absent) else None
    with sandbox(tmp_path, [c for b in runnable for c in b.commands()], database) as box:
        crawled = False
        printed = ""  # what the last runnable block's commands printed
        for block in blocks_of(path):
            lacking = sorted(block.needs & set(absent)) if block.marker == "runnable" else []
            if lacking:  # the blocks before it ran and passed
                pytest.skip(f"{block.where} and after: {'; '.join(absent[n] for n in lacking)}")
            if block.marker == "file":
                box.write(block)
            elif block.marker == "output":
                missing = missing_lines([box.rewrite(ln) for ln in block.body], printed)
                assert missing == [], (
                    f"{block.where}: not in the output of the block before, in order: "
                    f"{missing}\n--- output\n{printed[-3000:]}"
                )
            elif block.marker == "runnable":
                if block.after_crawl and not crawled:
                    box.run("framework crawl demo", {0, 4}, f"{block.where} (after=crawl)")
                    crawled = True
                printed = "".join(
                    box.run(command, block.exits(), block.where) for command in block.commands()
                )


@pytest.mark.process
def test_ship_dry_run_needs_no_endpoint(tmp_path: Path) -> None:
    """docs/shipping.md's `framework ship <job> --dry-run`: a dry run sends nothing."""
    with sandbox(tmp_path, []) as box:
        box.run("framework crawl demo -L WARNING", {4}, "setup")
        box.run("framework ship demo --dry-run", {0}, "dry run")
        box.run("framework ship demo", {2}, "a real run still needs an endpoint")


@pytest.mark.process
def test_readme_example_error_is_the_real_output(tmp_path: Path) -> None:
    """The README's bad-spec example is what `framework validate` prints for that mistake."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"^(projects/myjob/job\.yaml:\d+:\d+: unknown key 'feilds'.*)$", readme, re.M)
    assert shown, "the README shows no example error for the 'feilds' typo"
    root = tmp_path / "repo"
    shutil.copytree(REPO, root, ignore=COPY_IGNORE, symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEWORK_")}
    cli = [sys.executable, "-c", "import sys; from framework.cli import main; sys.exit(main())"]
    procs.run(
        [*cli, "new", "myjob", "--template", "list-detail-subtabs"], cwd=root, env=env, check=True
    )
    spec = root / "projects" / "myjob" / "job.yaml"
    text = spec.read_text(encoding="utf-8")
    # The mistake the README describes: the detail page's `fields:` misspelt.
    head, sep, tail = text.partition("\ndetail:\n")
    spec.write_text(head + sep + tail.replace("  fields:", "  feilds:", 1), encoding="utf-8")
    done = procs.run(
        [*cli, "validate", "myjob"], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert shown.group(1) in done.stderr.splitlines(), (shown.group(1), done.stderr)
