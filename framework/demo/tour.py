"""`make demo` / `framework demo`: the product's point in one run, on the bundled site.

The story it tells, all on 127.0.0.1 and with nothing to configure:

1. serve the demo site (a thread of this process) and the reference ingest endpoint
   (a child process, SQLite in the demo folder) on free ports;
2. crawl the demo job and kill the crawl part-way with SIGKILL, as a crash would,
   once the workspace shows enough rows ok;
3. `framework status demo`: what the workspace knows after the crash;
4. crawl again: it resumes, fetching only what is missing;
5. `framework ship demo`, then ship again: the second run skips everything;
6. a short table of the figures and where the files are.

It works in a fresh temporary folder (printed, and kept so it can be looked at): a copy
of ``projects/demo/job.yaml`` whose start URL names the port the site really got, the
workspace under ``var/demo/`` and the ingest database. Copying the spec keeps the spec
format untouched: a job's start URLs are plain URLs, and the demo site's port is only
known at run time.

Every step runs the real command line in a child process of its own process group, so
this module imports no plugin (the core never does) and a Ctrl-C or SIGTERM of the demo
stops every child it started before it returns.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import FrameType

from framework.cli.hints import Locator
from framework.demo.site import DemoSite
from framework.errors import FrameworkError
from framework.project import find_root
from framework.workspace import Workspace

JOB = "demo"
SPEC_PORT = 8800  # the port projects/demo/job.yaml names; the copy gets the real one
KILL_AFTER_OK = 80  # rows ok before the crash; the demo job has about 290 rows
# The site answers this much later during the first crawl only, so the kill lands
# part-way even on a loaded machine (the whole crawl takes under a second otherwise).
FIRST_CRAWL_DELAY = 0.05
_CLI = ("-c", "import sys; from framework.cli import main; sys.exit(main())")
_SHIP_LINE = re.compile(r"^ship: (.*?);")
_SERVING = re.compile(r"on http://127\.0\.0\.1:(\d+)")


class DemoFailed(Exception):
    """A step of the demo could not run; the message says which and why."""


@dataclass
class Figures:
    """What the summary table shows, gathered step by step."""

    killed_at_ok: int | None = None
    requests_first: int = 0
    requests_resumed: int = 0
    ok_fetched_twice: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    items: dict[str, int] = field(default_factory=dict)
    ship_first: dict[str, int] | None = None
    ship_again: dict[str, int] | None = None


class Children:
    """The child processes of the demo, each in its own process group (a crawl's
    Scrapy may start helpers of its own); :meth:`stop_all` ends every group."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: Sequence[str], cwd: Path, **kwargs: object) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            start_new_session=True,
            **kwargs,  # type: ignore[call-overload]
        )
        self._procs.append(proc)
        return proc

    def kill_group(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def stop_all(self, grace: float = 5.0) -> None:
        alive = [p for p in self._procs if p.poll() is None]
        for proc in alive:
            self.kill_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in alive:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_group(proc, signal.SIGKILL)
                proc.wait()
        # A group may outlive its leader (a helper it started): end the rest too. Only
        # the groups just stopped: an older group's id may belong to someone else by now.
        for proc in alive:
            self.kill_group(proc, signal.SIGKILL)


def _say(text: str = "") -> None:
    print(text, flush=True)


def _step(n: int, title: str) -> None:
    _say(f"\n== {n}/5 {title}")


def _prompt(args: Sequence[str]) -> None:
    _say(f"$ framework {' '.join(args)}")


class Tour:
    def __init__(self, repo: Path, folder: Path, port: int | None) -> None:
        self.repo = repo
        self.folder = folder
        self.port = port
        self.children = Children()
        self.figures = Figures()
        self.workspace = folder / "var" / JOB
        self.db = folder / "ingest.sqlite"

    # the command line ---------------------------------------------------------------

    def framework(self, *args: str) -> int:
        _prompt(args)
        proc = self.children.spawn([*_CLI, *args], self.folder)
        return proc.wait()

    def framework_captured(self, *args: str) -> tuple[int, str]:
        """Run a command, show its output as it comes and keep its stdout."""
        _prompt(args)
        proc = self.children.spawn([*_CLI, *args], self.folder, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        lines = []
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()
        return proc.wait(), "".join(lines)

    # the steps ----------------------------------------------------------------------

    def prepare(self) -> None:
        """The demo folder: the demo job with the site's real port in its start URL."""
        source = self.repo / "projects" / JOB / "job.yaml"
        text = source.read_text(encoding="utf-8")
        needle = f"127.0.0.1:{SPEC_PORT}"
        if needle not in text:
            raise DemoFailed(f"{source} no longer names {needle}: the demo cannot point it")
        target = self.folder / "projects" / JOB / "job.yaml"
        target.parent.mkdir(parents=True)
        target.write_text(text.replace(needle, f"127.0.0.1:{self.port}"), encoding="utf-8")
        # So `scrapy crawl demo` works from the demo folder too.
        shutil.copyfile(self.repo / "scrapy.cfg", self.folder / "scrapy.cfg")

    def start_ingest(self) -> tuple[subprocess.Popen[bytes], Path] | None:
        commands = {ep.name for ep in entry_points(group="framework.commands")}
        if not {"ingest", "ship"} <= commands:
            _say("(the ingest and ship plugins are not installed: the demo skips delivery)")
            return None
        log = self.folder / "ingest.log"
        args = ("ingest", "serve", "--db", f"sqlite:///{self.db}", "--port", "0")
        with log.open("wb") as out:
            # Port 0 and the port read back from its log: no race for a free port.
            proc = self.children.spawn(
                [*_CLI, *args], self.folder, stdout=out, stderr=subprocess.STDOUT
            )
        return proc, log

    def ingest_url(self, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _SERVING.search(log.read_text(encoding="utf-8", errors="replace"))
            if found:
                return f"http://127.0.0.1:{found.group(1)}"
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise DemoFailed(f"the ingest endpoint did not start; its log: {log}")

    def crash_crawl(self, site: DemoSite) -> None:
        _step(1, f"crawl, killed with SIGKILL once {KILL_AFTER_OK} rows are ok (a crash)")
        args = ("crawl", JOB, "-L", "WARNING")
        _prompt(args)
        proc = self.children.spawn([*_CLI, *args], self.folder)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            ok = self.ok_rows()
            if ok >= KILL_AFTER_OK:
                self.children.kill_group(proc, signal.SIGKILL)
                proc.wait()
                self.figures.killed_at_ok = ok
                _say(f"** killed (SIGKILL) with {ok} rows ok; nothing had a chance to clean up")
                break
            time.sleep(0.02)
        else:
            if proc.poll() is None:
                self.children.kill_group(proc, signal.SIGKILL)
                proc.wait()
                raise DemoFailed("the first crawl made no progress in 60 s")
            _say(f"(the crawl ended, exit {proc.returncode}, before it could be killed)")
        site.set_faults((), delay=0.0)
        self.figures.requests_first = len(self.url_log())

    def ok_rows(self) -> int:
        try:
            with Workspace.open(self.workspace, create=False, readonly=True) as ws:
                return sum(
                    n for st in ws.store.row_counts().values() for s, n in st.items() if s == "ok"
                )
        except (FrameworkError, OSError):
            return 0  # not created yet, or mid-creation

    def url_log(self) -> list[dict[str, object]]:
        path = self.workspace / "urls.jsonl"
        lines = []
        with suppress(FileNotFoundError), path.open(encoding="utf-8") as f:
            for line in f:
                with suppress(ValueError):  # a torn last line (the kill) is skipped
                    lines.append(json.loads(line))
        return lines

    def resume(self) -> None:
        _step(3, "crawl again: it resumes where the crash left it")
        code = self.framework("crawl", JOB, "-L", "WARNING")
        if code not in (0, 4):
            raise DemoFailed(f"the resumed crawl exited {code}")
        _say(
            f"(exit {code}: 4 says rows ended in error and a human should look; "
            "the demo site breaks three pages on purpose)"
        )
        log = self.url_log()
        first = self.figures.requests_first
        self.figures.requests_resumed = len(log) - first
        ok_before = {r.get("row") for r in log[:first] if r.get("outcome") == "ok"}
        self.figures.ok_fetched_twice = sum(
            1 for r in log[first:] if r.get("outcome") == "ok" and r.get("row") in ok_before
        )
        with Workspace.open(self.workspace, create=False, readonly=True) as ws:
            for per_kind in ws.store.row_counts().values():
                for status, n in per_kind.items():
                    self.figures.rows[str(status)] = self.figures.rows.get(str(status), 0) + n
            self.figures.items = dict(ws.store.item_counts())
            sample = next(iter(ws.store.iter_items(complete_only=True)), None)
        if sample is not None:
            _say(f"\none of the stored items, {sample.dedupe_key}:")
            for name, value in sample.data.items():
                shown = (
                    f"{len(value)} rows"
                    if isinstance(value, list)
                    else json.dumps(value, ensure_ascii=False)
                )
                _say(f"  {name:<10} {shown}")

    def ship(self, endpoint: str) -> None:
        _step(4, "ship through the one door")
        self.figures.ship_first = self._ship(endpoint)
        _step(5, "ship again: everything already arrived, so everything is skipped")
        self.figures.ship_again = self._ship(endpoint)

    def _ship(self, endpoint: str) -> dict[str, int]:
        code, out = self.framework_captured("ship", JOB, "--endpoint", endpoint)
        if code != 0:
            raise DemoFailed(f"`framework ship` exited {code}")
        for line in out.splitlines():
            found = _SHIP_LINE.match(line)
            if found:
                return {
                    name: int(n)
                    for name, n in (part.rsplit(" ", 1) for part in found.group(1).split(", "))
                }
        raise DemoFailed("`framework ship` printed no summary line")

    def summary(self) -> None:
        f = self.figures
        rows = [
            (
                "crawl 1 (killed)",
                f"{f.requests_first} requests, then SIGKILL at {f.killed_at_ok} rows ok"
                if f.killed_at_ok is not None
                else f"{f.requests_first} requests (finished before the kill)",
            ),
            (
                "crawl 2 (resumed)",
                f"{f.requests_resumed} requests; ok pages fetched again: {f.ok_fetched_twice}",
            ),
            (
                "pages",
                f"{f.rows.get('ok', 0)} ok, {f.rows.get('error', 0)} in error, "
                f"{f.rows.get('pending', 0)} pending",
            ),
            (
                "items",
                f"{f.items.get('complete', 0)} complete, {f.items.get('incomplete', 0)} incomplete",
            ),
        ]
        if f.ship_first is not None and f.ship_again is not None:
            sent = sum(f.ship_first.get(k, 0) for k in ("accepted", "updated", "duplicate"))
            resent = sum(f.ship_again.get(k, 0) for k in ("accepted", "updated", "duplicate"))
            rows += [
                ("shipped", f"{sent} ({f.ship_first.get('accepted', 0)} accepted)"),
                (
                    "duplicates avoided",
                    f"{f.ship_again.get('skipped', 0)} skipped by the re-ship, {resent} sent again",
                ),
            ]
        rows += [
            ("workspace", str(self.workspace)),
            ("URL log", str(self.workspace / "urls.jsonl")),
            ("ship log", str(self.workspace / "ship-log.jsonl")),
            ("ingest database", str(self.db)),
        ]
        width = max(len(name) for name, _ in rows)
        _say("\n== summary")
        for name, value in rows:
            _say(f"{name:<{width}}  {value}")
        # the workspace named, not implied by the folder: FRAMEWORK_WORKSPACE in the
        # user's shell would lead a bare `framework status demo` elsewhere
        look = Locator(JOB, JOB, str(self.workspace)).command("status")
        _say(f"\nlook around: cd {shlex.quote(str(self.folder))} && {look}")

    def run(self) -> None:
        ingest = self.start_ingest()  # starts while the crawl runs; its port comes later
        try:
            site = DemoSite(port=self.port or 0, delay=FIRST_CRAWL_DELAY)
            site.start()
        except OSError as exc:
            where = f"127.0.0.1:{self.port}" if self.port else "a free loopback port"
            raise DemoFailed(f"cannot serve the demo site on {where}: {exc}") from exc
        try:
            self.port = int(site.url.rsplit(":", 1)[1])
            self.prepare()
            _say(f"demo folder: {self.folder}")
            _say(f"demo site:   {site.url}/cases (70 cases, 3 AJAX sub-tabs each)")
            self.crash_crawl(site)
            _step(2, "what the workspace knows after the crash")
            self.framework("status", JOB)
            self.resume()
        finally:
            site.stop()
        if ingest is not None:
            endpoint = self.ingest_url(*ingest)
            _say(f"\ningest endpoint: {endpoint} (SQLite {self.db})")
            self.ship(endpoint)
        self.summary()


@contextmanager
def _interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGTERM (a test, `kill`) unwinds like Ctrl-C, so every finally runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(port: int | None = None) -> int:
    """Run the tour; 0 when every step ran, 2 when one could not, 130 on Ctrl-C."""
    if port is None:
        env = os.environ.get("DEMO_PORT", "").strip()
        if env:
            if not env.isdigit() or not 0 < int(env) < 65536:
                print(f"DEMO_PORT={env!r}: expected a port number", file=sys.stderr)
                return 2
            port = int(env)
    repo = find_root()
    folder = Path(tempfile.mkdtemp(prefix="framework-demo-"))
    tour = Tour(repo, folder, port)
    with _interrupts_as_keyboard_interrupt():
        try:
            tour.run()
        except DemoFailed as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("\ndemo: interrupted; stopping what it started", file=sys.stderr)
            return 130
        finally:
            tour.children.stop_all()
    return 0
