"""Hosts that cannot be reached and Retry-After values no server means, through the real CLI.

A refused port and a name that does not resolve are typed ``connect``/``dns``, a row's
attempts are spaced by the backoff, the run stops as a checkpoint (exit 3) with the rows
still retryable, and the next run tries them again. A robots.txt that cannot be fetched
is one log line. ``Retry-After: 99999999999999999999`` or ``999999999`` is clamped to
``FRAMEWORK_RETRY_AFTER_MAX``, shown by ``status`` and lifted by ``requeue
--clear-deferrals`` or ``--fresh``.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

from framework.demo.faults import Fault
from framework.workspace import RowStatus, Workspace
from framework.workspace.deferrals import NOT_BEFORE_META
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, TWISTED_CLIENT, events, url_log
from tests.fixtures.server import closed_port

EXIT_OK = 0
EXIT_CHECKPOINT = 3
BACKOFF = 0.2  # seconds: FRAMEWORK_RETRY_BACKOFF_BASE for these tests
# the stored attempt times have millisecond precision (truncated)
CLOCK_GRAIN = 0.002
DAY = 86400.0


@implementer(IResolverSimple)
class OfflineResolver:
    """Answers every lookup "no such name" without sending a packet, as a resolver does
    for the reserved ``.invalid`` names: the test must not send DNS queries out (the
    machine's resolver would forward a ``.invalid`` lookup). Loaded by the crawl child
    through ``-s TWISTED_DNS_RESOLVER``; it raises what Twisted's threaded resolver
    raises for an unknown name, so Scrapy's handler wraps it exactly as it would."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> OfflineResolver:
        return cls(reactor)

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Any = ()) -> defer.Deferred[str]:
        return defer.fail(DNSLookupError(f"no results for hostname lookup: {name}"))


def _only_row(ws: Path) -> tuple[Any, list[dict[str, Any]]]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        rows = list(w.store.iter_rows())
        assert len(rows) == 1
        return rows[0], [dict(a) for a in w.store.attempts(rows[0].id)]


def _status(crawl_cli: Callable[..., Any], ws: Path) -> dict[str, Any]:
    r = crawl_cli("status", "job", "--workspace", str(ws), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _crawl(crawl_cli: Callable[..., Any], spec: Path, ws: Path, *extra: str) -> Any:
    return crawl_cli(
        "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING",
        "-s", f"FRAMEWORK_RETRY_BACKOFF_BASE={BACKOFF}", *extra, timeout=120,
    )  # fmt: skip


def _assert_spaced(attempts: list[dict[str, Any]]) -> None:
    stamps = [datetime.fromisoformat(a["time"]) for a in attempts]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
    assert gaps
    assert all(g >= BACKOFF - CLOCK_GRAIN for g in gaps), gaps


@pytest.mark.process
@pytest.mark.parametrize(
    ("base", "kind", "extra"),
    [
        pytest.param(f"http://127.0.0.1:{closed_port()}", "connect", (), id="refused"),
        # Twisted's client with an offline resolver: the framework's client (aiohttp)
        # would ask the machine's resolver, which forwards .invalid lookups; its DNS
        # errors are typed in tests/crawl/test_crawl_http_client.py
        pytest.param(
            "http://nonexistent.invalid",
            "dns",
            ("-s", f"TWISTED_DNS_RESOLVER={__name__}.OfflineResolver", *TWISTED_CLIENT),
            id="unresolvable",
        ),
    ],
)
def test_a_host_that_cannot_be_reached_is_a_checkpoint_and_its_rows_stay_retryable(
    base: str, kind: str, extra: tuple[str, ...], good_spec, tmp_path, crawl_cli
) -> None:
    spec = good_spec("cases", base, tmp_path)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws, *extra)
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "refused every connection or could not be resolved" in r.stderr
    # the robots.txt failure is one line, not Scrapy's traceback
    robots = [line for line in r.stderr.splitlines() if "robots.txt" in line]
    assert len(robots) == 1, r.stderr[-3000:]
    assert "could not be fetched" in robots[0]
    # two warnings, the summary table (header, one kind, items) and the verdict: no noise
    assert len(r.stderr.splitlines()) <= 8, r.stderr

    row, attempts = _only_row(ws)
    assert row.status is RowStatus.ERROR
    assert row.last_error_kind is not None
    assert row.last_error_kind.value == kind
    assert [a["error_kind"] for a in attempts] == [kind] * 3
    _assert_spaced(attempts)
    # the outage spent none of the row's budget: the next run retries it
    assert row.retryable
    assert row.attempts == 0
    status = _status(crawl_cli, ws)
    assert status["queue"]["retryable"] == 1
    assert status["queue"]["exhausted"] == 0
    assert status["done"] is False
    down = [e for e in events(ws) if e["event"] == "host_down"]
    assert len(down) == 1
    assert down[0]["error_kind"] == kind
    assert events(ws)[-1]["reason"] == "host_down"

    again = _crawl(crawl_cli, spec, ws, *extra)
    assert again.returncode == EXIT_CHECKPOINT, again.stderr[-3000:]
    assert "nothing to do" not in again.stderr
    row, attempts = _only_row(ws)
    assert [a["error_kind"] for a in attempts] == [kind] * 6
    assert row.retryable
    assert row.attempts == 0
    assert len(url_log(ws)) == 6


@pytest.mark.process
def test_a_host_that_comes_back_is_crawled_to_the_end(make_site, good_spec, tmp_path, crawl_cli):
    port = closed_port()
    spec = good_spec("cases", f"http://127.0.0.1:{port}", tmp_path)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-3000:]
    # the host is back, on the same port, with a small clean site
    site = make_site(port=port, cases=3, edge_cases=False)
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert site.hits("/cases") == 1
    status = _status(crawl_cli, ws)
    assert status["done"] is True
    assert status["items"]["complete"] == 3


@pytest.mark.kill
def test_a_host_that_goes_down_mid_crawl_loses_no_row(make_site, good_spec, tmp_path, crawl_cli):
    """Concurrent requests fail together when the site goes away mid-crawl: every one of
    them (those after the stop too) gives its attempt back, and once the site is back
    the crawl ends with every record, as if nothing had happened."""
    site = make_site(delay=0.05, edge_cases=False)
    port = int(site.url.rsplit(":", 1)[1].strip("/"))
    expected = {rec["dedupe_key"] for rec in site.truth.expected_records()}
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    proc = procs.popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "WARNING",
         "-s", f"FRAMEWORK_RETRY_BACKOFF_BASE={BACKOFF}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(_lines(ws)) < 40 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the crawl ended before the site went down"
        site.stop()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_CHECKPOINT, err[-3000:]
    assert "Traceback" not in err
    assert events(ws)[-1]["reason"] == "host_down"
    status = _status(crawl_cli, ws)
    assert status["queue"]["exhausted"] == 0
    assert status["queue"]["to_fetch"] > 0

    make_site(port=port, edge_cases=False)  # back, with the same data (same seed)
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    with Workspace.open(ws, create=False, readonly=True) as w:
        assert {i.dedupe_key for i in w.store.iter_items(complete_only=True)} == expected


def _lines(ws: Path) -> list[str]:
    try:
        return (ws / "urls.jsonl").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def _stored_deadlines(ws: Path) -> dict[str, float]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        raw = w.store.get_meta(NOT_BEFORE_META)
    return json.loads(raw) if raw else {}


@pytest.mark.process
@pytest.mark.parametrize("retry_after", [99999999999999999999, 999999999])
def test_an_absurd_retry_after_is_clamped_shown_and_lifted_by_requeue(
    retry_after: int, make_site, good_spec, tmp_path, crawl_cli
) -> None:
    site = make_site(
        cases=3, edge_cases=False, faults=[Fault("/cases", 429, times=1, retry_after=retry_after)]
    )
    host = site.url.removeprefix("http://").rstrip("/")
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-3000:]
    assert "over the cap" in r.stderr
    deadline = _stored_deadlines(ws)[host]
    assert deadline <= time.time() + DAY  # clamped to FRAMEWORK_RETRY_AFTER_MAX

    # every later run: no crash, a checkpoint that names the (clamped) time
    again = _crawl(crawl_cli, spec, ws)
    assert again.returncode == EXIT_CHECKPOINT, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    assert "asked not to be called before" in again.stderr
    assert site.hits("/cases") == 1

    status = _status(crawl_cli, ws)
    [deferral] = status["deferrals"]
    assert deferral["host"] == host
    assert 0 < deferral["seconds_left"] <= DAY
    text = crawl_cli("status", "job", "--workspace", str(ws))
    assert f"deferred: {host} asked not to be called before" in text.stdout

    r = crawl_cli("requeue", "job", "--workspace", str(ws), "--clear-deferrals")
    assert r.returncode == 0, r.stderr
    assert "cleared 1 Retry-After deferrals" in r.stdout
    assert _status(crawl_cli, ws)["deferrals"] == []
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert site.hits("/cases") == 2


@pytest.mark.process
def test_a_fresh_run_lifts_a_deferral(make_site, good_spec, tmp_path, crawl_cli):
    site = make_site(
        cases=3, edge_cases=False, faults=[Fault("/cases", 503, times=1, retry_after=999999999)]
    )
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    assert _crawl(crawl_cli, spec, ws).returncode == EXIT_CHECKPOINT
    assert _crawl(crawl_cli, spec, ws).returncode == EXIT_CHECKPOINT  # deferred
    r = _crawl(crawl_cli, spec, ws, "--fresh")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    cleared = [e for e in events(ws) if e["event"] == "deferrals_cleared"]
    assert len(cleared) == 1
    assert cleared[0]["why"] == "fresh run requested"
    assert _status(crawl_cli, ws)["deferrals"] == []


@pytest.mark.process
@pytest.mark.parametrize(
    "stored",
    [
        '{"HOST": 1e20}',  # written before the clamp: datetime cannot hold it
        '{"HOST": "soon", "other:1": NaN}',
        "not json",
    ],
)
def test_a_deadline_written_before_the_clamp_does_not_crash_status_or_crawl(
    stored: str, make_site, good_spec, tmp_path, crawl_cli
) -> None:
    site = make_site(cases=3, edge_cases=False)
    host = site.url.removeprefix("http://").rstrip("/")
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    with Workspace.open(ws, create=True) as w:
        w.store.set_meta(NOT_BEFORE_META, stored.replace("HOST", host))
    status = _status(crawl_cli, ws)
    assert [d["host"] for d in status["deferrals"]] == ([host] if "1e20" in stored else [])
    r = _crawl(crawl_cli, spec, ws)
    assert "Traceback" not in r.stderr
    if "1e20" in stored:
        # clamped to a day from now: still over the cap, so the run waits its turn
        assert r.returncode == EXIT_CHECKPOINT, r.stderr[-3000:]
        assert "asked not to be called before" in r.stderr
        assert _stored_deadlines(ws)[host] <= time.time() + DAY
        assert 0 < _status(crawl_cli, ws)["deferrals"][0]["seconds_left"] <= DAY
    else:
        assert r.returncode == EXIT_OK, r.stderr[-3000:]
        assert _stored_deadlines(ws) == {}
    assert any(e["event"] == "deferrals_clamped" for e in events(ws))
