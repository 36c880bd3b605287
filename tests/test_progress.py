"""Progress of `framework reparse` and `framework ship` (framework.progress, shared with
the crawl's line): done of total, rate and ETA; a live line on a terminal, plain
periodic lines elsewhere, none with -q. The interval is forced short through
FRAMEWORK_PROGRESS_INTERVAL so a short run shows several lines."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from framework import progress
from framework.cli import main
from framework.workspace import Workspace
from tests.fixtures.crawl import run_cli
from tests.fixtures.ingest import IngestServer
from tests.fixtures.site import write_good_spec

TINY = "0.000001"  # seconds: every unit passes the interval


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------- the meter
def test_plain_lines_come_once_per_interval_with_rate_and_eta() -> None:
    clock, out = _Clock(), io.StringIO()
    meter = progress.Meter(
        "reparse job", 100, "pages", "lines", every=5.0, stream=out, clock=clock,
        detail=lambda: "items 3 changed",
    )  # fmt: skip
    with meter:
        for _ in range(10):
            clock.now += 1.0
            meter.advance()  # 1 page/s
    assert out.getvalue().splitlines() == [
        "progress: reparse job: 5/100 pages (5%) | 1.0 pages/s | ETA 0:01:35 | items 3 changed",
        "progress: reparse job: 10/100 pages (10%) | 1.0 pages/s | ETA 0:01:30 | items 3 changed",
    ]
    assert meter.shown == 2


def test_no_total_no_eta_and_quiet_shows_nothing() -> None:
    clock, out = _Clock(), io.StringIO()
    with progress.Meter("ship", None, "items", "lines", every=1.0, stream=out, clock=clock) as m:
        clock.now += 2.0
        m.update(4)
    assert out.getvalue() == "progress: ship: 4 items | 2.0 items/s\n"
    quiet = progress.Meter("ship", 10, "items", None, every=1.0, stream=out, clock=clock)
    with quiet:
        for _ in range(5):
            clock.now += 2.0
            quiet.advance()
    assert quiet.shown == 0
    assert out.getvalue().count("\n") == 1


def test_a_terminal_gets_the_line_redrawn_and_its_last_state() -> None:
    term = _Terminal()
    assert progress.mode(False, term) == progress.LIVE
    assert progress.mode(False, io.StringIO()) == progress.LINES
    assert progress.mode(True, term) is None
    with progress.Meter("reparse job", 3, "pages", progress.mode(False, term), stream=term) as m:
        for _ in range(3):
            m.advance()
    text = term.getvalue()
    assert "reparse job: 3/3 pages (100%)" in text
    assert "progress:" not in text  # no plain lines on a terminal
    assert "\x1b[2K" in text  # redrawn in place, then taken down


def test_the_interval_comes_from_the_environment_then_the_setting(monkeypatch) -> None:
    monkeypatch.delenv(progress.INTERVAL_ENV, raising=False)
    assert progress.interval("lines") == progress.LINES_INTERVAL
    assert progress.interval("live") == progress.LIVE_INTERVAL
    assert progress.interval("lines", "2.5") == 2.5
    assert progress.interval("lines", "nonsense") == progress.LINES_INTERVAL
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.25")
    assert progress.interval("lines", "2.5") == 0.25
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")  # not above zero: the next one
    assert progress.interval("lines", "2.5") == 2.5


# ------------------------------------------------------------- reparse (the CLI)
def _progress_lines(stderr: str, label: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"progress: {label}: ")]


@pytest.mark.process
def test_reparse_prints_periodic_plain_lines_and_none_with_q(make_site, tmp_path, monkeypatch):
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages
    monkeypatch.setenv(progress.INTERVAL_ENV, TINY)

    # --all: the spec did not change, so without it no page would be read (the pages
    # left unread are counted at once, in one step of the progress)
    r = run_cli("reparse", str(spec), "--workspace", str(ws), "--all")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = _progress_lines(r.stderr, "reparse fixture-cases")
    assert len(lines) >= 10, r.stderr[-2000:]
    total = int(lines[0].split("/")[1].split()[0])
    assert total > 200  # every stored page of the crawl
    done = [int(line.split(": ", 2)[2].split("/")[0]) for line in lines]
    assert done == sorted(done)
    assert done[-1] <= total
    assert " pages/s" in lines[-1]
    assert "items 0 new, " in lines[-1]
    assert "reparsed " in r.stderr  # the summary after them

    r = run_cli("reparse", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "progress:" not in r.stderr


# ---------------------------------------------------------------- ship (the CLI)
def test_ship_prints_periodic_plain_lines_and_none_with_q(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "home"
    (root / "projects").mkdir(parents=True)
    monkeypatch.setenv("FRAMEWORK_HOME", str(root))
    monkeypatch.delenv("FRAMEWORK_SHIP_ENDPOINT", raising=False)
    monkeypatch.delenv("FRAMEWORK_SHIP_TOKEN_ENV", raising=False)
    monkeypatch.setenv(progress.INTERVAL_ENV, TINY)
    ws = make_ship_workspace(30)
    args = ["ship", "job", "--workspace", str(ws.path), "--endpoint", ingest_server.url]

    assert main([*args, "--batch-size", "1"]) == 0
    err = capsys.readouterr().err
    lines = _progress_lines(err, "ship")
    assert len(lines) >= 5, err
    assert lines[0].startswith("progress: ship: 0/30 items (0%) | ")
    assert any(line.startswith("progress: ship: 29/30 items") for line in lines), lines
    assert "shipped 29, skipped 0, rejected 0, error 0" in err

    # again: every item is delivered with this content, each a skip; then quiet
    assert main([*args, "-q"]) == 0
    assert "progress:" not in capsys.readouterr().err
