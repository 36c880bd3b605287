"""What the dashboard's tests share: a workspace built in-process, the dashboard served
on 127.0.0.1 port 0, a reader of its server-sent events, /metrics parsed by
prometheus-client, and the check that a run of two workers shows summed."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from framework_dashboard.app import create_app
from framework_dashboard.progress import Tracker
from framework_dashboard.reader import Reader
from framework_dashboard.serve import BackgroundServer
from prometheus_client.parser import text_string_to_metric_families

from framework.workspace import ErrorKind, NewRow, Outcome, Workspace

SECRET = "s3cret-dash-7731"


def build_workspace(path: Path | str, *, job: str = "shop") -> Workspace:
    """A workspace with rows in every state, an error note naming a secret query
    parameter and a few events: what a crawl leaves, without a crawl."""
    ws = Workspace.open(path, create=True)
    rows = ws.store.seed([NewRow("list", f"http://127.0.0.1:9/list?page={n}") for n in range(1, 4)])
    ws.store.commit(
        Outcome(
            rows[0].id,
            ok=True,
            http_status=200,
            new_rows=[NewRow("detail", f"http://127.0.0.1:9/item/{n}") for n in range(4)],
        )
    )
    ws.store.commit(
        Outcome(
            rows[1].id,
            ok=False,
            http_status=404,
            error_kind=ErrorKind.HTTP_4XX,
            error=f"HTTP 404 at http://127.0.0.1:9/list?page=2&token={SECRET}",
            retryable=False,
        )
    )
    ws.events.append({"time": "2026-01-01T00:00:00+00:00", "event": "run_started", "job": job})
    return ws


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    root: Path,
    *,
    interval: float = 0.1,
    targets: dict[str, str] | None = None,
    clock: Callable[[], float] | None = None,
) -> Iterator[tuple[BackgroundServer, Reader]]:
    """The dashboard of the project at ``root``; ``clock`` (epoch seconds) is the one
    its live counts are sampled by: a hand-moved clock makes pages/s and the ETA exact
    (a sample is kept while it reads less than ``interval`` later)."""
    tracker = Tracker(min_interval=interval, clock=clock or time.time)
    reader = Reader(root, targets=targets, tracker=tracker)
    server = BackgroundServer(create_app(reader, bind="127.0.0.1", interval=interval))
    with server:
        yield server, reader


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    """(status, headers (case-insensitive), body) of a GET."""
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - 127.0.0.1 only
    try:
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310
            return r.status, r.headers, r.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode("utf-8")


def samples(text: str, name: str, **where: str) -> list[Any]:
    """The samples of /metrics' ``text`` named ``name`` (a counter's with its ``_total``),
    parsed by prometheus-client's own parser, whose labels include ``where``."""
    return [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and where.items() <= s.labels.items()
    ]


def by_label(text: str, name: str, label: str, **where: str) -> dict[str, float]:
    """``name``'s values by one of their labels (each value of it once)."""
    found: dict[str, float] = {}
    for s in samples(text, name, **where):
        key = s.labels[label]
        assert key not in found, f"{name}: two samples with {label}={key!r}"
        found[key] = s.value
    return found


class Stream:
    """One server-sent event stream, parsed message by message."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - 127.0.0.1 only
        self.response = urllib.request.urlopen(request, timeout=30)  # noqa: S310
        self.content_type = self.response.headers.get("Content-Type", "")
        self._buffer = b""

    def messages(self) -> Iterator[dict[str, Any]]:
        while True:
            while b"\n\n" not in self._buffer:
                chunk = self.response.read1(65536)
                if not chunk:
                    return
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            message: dict[str, Any] = {}
            for line in raw.decode("utf-8").split("\n"):
                name, _, value = line.partition(": ")
                if name in ("id", "event", "data", "retry"):
                    message[name] = value
            if "data" in message:
                message["data"] = json.loads(message["data"])
            if message:
                yield message

    def until(
        self, wanted: Callable[[dict[str, Any]], bool], timeout: float = 30
    ) -> list[dict[str, Any]]:
        """The messages up to and with the first one ``wanted`` takes."""
        deadline = time.monotonic() + timeout
        seen = []
        for message in self.messages():
            seen.append(message)
            if wanted(message):
                return seen
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"no such message within {timeout}s; saw {seen[-5:]}")

    def close(self) -> None:
        self.response.close()


# --- the findings of a run of several workers, as the dashboard must show them ----------

FILL_ROW = re.compile(
    r'<tr data-fill="(?P<kind>[^".]+)\.(?P<field>[^"]+)"><td>[^<]*</td>'
    r'<td class="num">(?P<last>[^<]*)</td><td>.*?</td>'
    r'<td class="num">(?P<all>[^<]*)</td>'
)


def fill_cells(page: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The page's fill-rate table: (kind, field) -> (last run, all items) as shown."""
    return {(m["kind"], m["field"]): (m["last"], m["all"]) for m in FILL_ROW.finditer(page)}


def pct(share: float | None) -> str:
    """A share as the page writes it."""
    return "\N{EN DASH}" if share is None else f"{100 * share:.1f}%"


def worker_ends(target: Path | str) -> list[dict[str, Any]]:
    """Every worker's ``run_finished`` of a workspace that saw one run, read from its
    event log (a folder's file or a database's table) independently of the dashboard."""
    with Workspace.open(target, create=False, readonly=True) as ws:
        return [e for e in ws.events if e.get("event") == "run_finished"]


def url_lines(target: Path | str) -> list[dict[str, Any]]:
    with Workspace.open(target, create=False, readonly=True) as ws:
        return list(ws.urls)


def assert_every_worker_counted(
    base: str,
    job: str,
    status: dict[str, Any],
    ends: list[dict[str, Any]],
    lines: list[dict[str, Any]],
) -> None:
    """The dashboard at ``base`` shows ``job`` as ``status --json`` does where status
    is whole (rows, items), and the last run as the sum of every worker's
    ``run_finished`` (``ends``), where status shows one worker's."""
    assert len(ends) == 2
    assert all(isinstance(e.get("worker"), int) for e in ends)
    assert len({e["worker"] for e in ends}) == 2
    requests = sum(e["counts"]["requests"] for e in ends)
    assert all(e["counts"]["requests"] > 0 for e in ends), "a worker fetched nothing"
    assert status["last_run"]["counts"]["requests"] < requests  # status: one worker's
    errors_by_kind: Counter[str] = Counter()
    fill: dict[str, dict[str, Any]] = {}
    for e in ends:
        errors_by_kind.update(e["counts"].get("errors_by_kind") or {})
        for kind, entry in (e.get("fill") or {}).items():
            mine = fill.setdefault(kind, {"records": 0, "fields": Counter()})
            mine["records"] += entry["records"]
            mine["fields"].update(entry["fields"])
    drift = {(d["kind"], d["field"], d["reason"]) for e in ends for d in e.get("drift") or []}

    _, _, text = get(f"{base}/metrics")
    _, _, api = get(f"{base}/api/jobs/{job}")
    _, _, page = get(f"{base}/jobs/{job}")

    # /metrics: the workspace's figures, every worker's requests
    rows = {
        (s.labels["kind"], s.labels["state"]): s.value
        for s in samples(text, "framework_rows", job=job)
    }
    assert rows == {
        (kind, state): counts[state]
        for kind, counts in status["rows"]["by_kind"].items()
        for state in ("pending", "ok", "error")
    }
    items = by_label(text, "framework_items", "state", job=job)
    assert items == {s: status["items"][s] for s in ("complete", "incomplete")}
    (pages,) = samples(text, "framework_pages_total", job=job)
    assert pages.value == len(lines) == requests
    errors = sum(s.value for s in samples(text, "framework_errors_total", job=job))
    failed = sum(e["counts"]["errors"] + e["counts"].get("fenced", 0) for e in ends)
    assert errors == failed == sum(1 for line in lines if line.get("outcome") != "ok")
    (running,) = samples(text, "framework_crawl_running", job=job)
    assert running.value == 0

    # the report: status's, with the last run summed over both workers
    report = json.loads(api)
    assert report["rows"] == status["rows"]
    assert report["items"]["total"] == status["items"]["total"]
    found = report["run_findings"]
    assert found["workers"] == 2
    assert found["counts"]["requests"] == requests
    assert found["counts"].get("errors_by_kind", {}) == dict(errors_by_kind)
    assert {k: v["records"] for k, v in found["fill"].items()} == {
        k: v["records"] for k, v in fill.items()
    }
    assert {(d["kind"], d["field"], d["reason"]) for d in found["drift"]} == drift

    # the page: status's totals live, the summed run below
    by_status = status["rows"]["by_status"]
    for state in ("ok", "pending", "error"):
        assert f'data-v="{state}">{by_status[state]}<' in page
    assert "(summed over 2 workers)" in page
    assert f"<tr><th>requests</th><td>{requests}</td></tr>" in page
    stored = status["fill_rates"]["stored"]
    cells = fill_cells(page)
    for kind, entry in fill.items():
        n = entry["records"]
        assert f"{n} / {stored[kind]['records']} records" in page
        for name, filled in entry["fields"].items():
            last, every = cells[(kind, name)]
            assert last == pct(round(filled / n, 3))
            assert every == pct(stored[kind]["fields"].get(name))
    for kind, name, reason in drift:
        shown = "matched fallback" if reason == "fallback" else "filled"
        assert f"<li>{kind}.{name}: {shown}" in page
