"""The event outbox: every accepted/updated write and every handoff change appends an
event in its own transaction; ``GET /v1/events`` pages through them and
``GET /v1/events/stream`` serves them as Server-Sent Events that resume from
``Last-Event-ID``. The stream survives a SIGKILLed server while two server processes
write at once: every event arrives exactly once, in order (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from framework_ingest import events, handoff
from framework_ingest.db import open_backend

from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer, make_item

FRAMEWORK = str(Path(sys.executable).parent / "framework")


def test_writes_and_handoff_changes_append_events_in_order(
    any_ingest_server: IngestServer,
) -> None:
    s = any_ingest_server
    post = lambda body, route="/v1/items": requests.post(  # noqa: E731
        f"{s.url}{route}", json=body, timeout=10
    )
    post(make_item("1", {"v": 1}))
    post(make_item("1", {"v": 1}))  # duplicate: no event
    post(make_item("1", {"v": 2}))
    post([make_item("3"), make_item("2"), make_item("2")], "/v1/items/batch")
    backend = s.store.backend
    claimed = handoff.claim(backend, 2)
    handoff.done(backend, claimed[0]["claim_id"], [claimed[0]["dedupe_key"]])
    handoff.reap(backend, 0)
    got = [(e["seq"], e["type"], e["dedupe_key"], e["version"]) for e in s.events()]
    assert got[:5] == [
        (1, "accepted", "test:1", 1),
        (2, "updated", "test:1", 2),
        (3, "accepted", "test:2", 1),  # a batch is written (and announced) in key order
        (4, "accepted", "test:3", 1),
        (5, "claimed", claimed[0]["dedupe_key"], 2 if claimed[0]["dedupe_key"] == "test:1" else 1),
    ]
    assert [e[1] for e in got[5:]] == ["claimed", "done", "reaped"]

    r = requests.get(f"{s.url}/v1/events", params={"after": 2, "limit": 3}, timeout=10)
    page = r.json()
    assert [e["seq"] for e in page["events"]] == [3, 4, 5]
    assert (page["next_after"], page["last_seq"]) == (5, 8)
    assert page["events"][0]["content_hash"] == make_item("2")["content_hash"]
    r = requests.get(f"{s.url}/v1/events", params={"after": 8}, timeout=10)
    assert (r.json()["events"], r.json()["next_after"]) == ([], 8)
    for bad in ({"after": "-1"}, {"after": "x"}, {"limit": "0"}, {"limit": "1001"}):
        r = requests.get(f"{s.url}/v1/events", params=bad, timeout=10)
        assert r.status_code == 422, bad


def test_concurrent_writers_get_gapless_sequences(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server

    def writer(n: int) -> None:
        for i in range(15):
            batch = [make_item(f"{n}-{i}-{j}") for j in range(3)]
            requests.post(f"{s.url}/v1/items/batch", json=batch, timeout=30)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    seqs = [e["seq"] for e in s.events()]
    assert seqs == list(range(1, 4 * 15 * 3 + 1))
    assert len({e["dedupe_key"] for e in s.events()}) == len(seqs)


def test_a_reader_polling_during_concurrent_writes_never_skips_one(
    any_ingest_server: IngestServer,
) -> None:
    """The race a database sequence loses: 102 committed and read before 101 commits.
    With the counter row, what a reader sees is always a gapless prefix."""
    s = any_ingest_server
    done = threading.Event()
    seen: list[int] = []

    def writer(n: int) -> None:
        backend = open_backend(s.db_url)  # its own connections, like another process
        try:
            for i in range(25):
                batch = [make_item(f"{n}-{i}-{j}") for j in range(2)]
                requests.post(f"{s.url}/v1/items/batch", json=batch, timeout=30)
                handoff.claim(backend, 1)  # handoff events interleave with write events
        finally:
            backend.close()

    def reader() -> None:
        backend = open_backend(s.db_url)
        cursor = 0
        try:
            while True:
                finished = done.is_set()
                for event in events.page(backend, cursor, 1000):
                    seen.append(event["seq"])
                    cursor = event["seq"]
                if finished:
                    return
        finally:
            backend.close()

    watcher = threading.Thread(target=reader)
    watcher.start()
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    watcher.join(60)
    assert seen == list(range(1, 4 * 25 * 3 + 1))


# -- the stream across a killed server ---------------------------------------------------


def _serve(db_url: str) -> tuple[subprocess.Popen[str], str]:
    proc = procs.popen(
        [FRAMEWORK, "ingest", "serve", "--db", db_url, "--port", "0", "--no-access-log"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    match = re.search(r"on (http://127\.0\.0\.1:\d+)", first)
    assert match, first
    url = match.group(1)
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"{url}/healthz", timeout=5).ok:
                return proc, url
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.05)


def _sse(response: requests.Response) -> Iterator[dict[str, Any]]:
    """Complete SSE messages as they arrive (a message cut by a kill is never yielded)."""
    buffer = b""
    for chunk in response.iter_content(chunk_size=None):
        buffer += chunk
        while b"\n\n" in buffer:
            message, buffer = buffer.split(b"\n\n", 1)
            fields: dict[str, str] = {}
            for line in message.decode().splitlines():
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
            if "data" in fields:
                yield {"id": int(fields["id"]), **json.loads(fields["data"])}


class Reader(threading.Thread):
    """Reads one stream connection into ``received`` until the connection ends."""

    def __init__(self, url: str, received: list[dict[str, Any]], last_id: int | None) -> None:
        super().__init__(daemon=True)
        headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
        self.response = requests.get(
            f"{url}/v1/events/stream", headers=headers, stream=True, timeout=(5, 60)
        )
        assert self.response.status_code == 200
        assert self.response.headers["Content-Type"].startswith("text/event-stream")
        self.received = received

    def run(self) -> None:
        try:
            for message in _sse(self.response):
                self.received.append(message)
        except Exception:  # the server was killed, or the test closed the connection
            return


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.kill
def test_stream_resumes_after_a_killed_server_exactly_once_in_order(
    make_ingest_db_url: Callable[[str], str], ingest_backend: str
) -> None:
    db_url = make_ingest_db_url(ingest_backend)
    a, a_url = _serve(db_url)
    b, b_url = _serve(db_url)
    procs = [a, b]
    received: list[dict[str, Any]] = []
    stop = threading.Event()
    target = {"a": a_url}

    def writer(name: str, url_of: Callable[[], str]) -> None:
        i = 0
        while not stop.is_set():
            item = make_item(f"{name}-{i}", source_type="w")
            try:
                requests.post(f"{url_of()}/v1/items", json=item, timeout=10)
                i += 1
            except requests.RequestException:  # A is down: retry the same item on the new A
                time.sleep(0.05)

    try:
        reader = Reader(a_url, received, None)
        reader.start()
        writers = [
            threading.Thread(target=writer, args=("a", lambda: target["a"]), daemon=True),
            threading.Thread(target=writer, args=("b", lambda: b_url), daemon=True),
        ]
        for w in writers:
            w.start()
        _wait(lambda: len(received) >= 30, "the stream delivered nothing")
        a.send_signal(signal.SIGKILL)  # mid-stream, mid-writes
        a.wait(30)
        reader.join(30)
        assert not reader.is_alive()
        seen_before = len(received)
        assert seen_before >= 30
        a2, target["a"] = _serve(db_url)
        procs.append(a2)
        reader = Reader(target["a"], received, received[-1]["id"])
        reader.start()
        _wait(lambda: len(received) >= seen_before + 60, "the resumed stream stalled")
        stop.set()
        for w in writers:
            w.join(30)
        last = _last_seq(target["a"])
        _wait(lambda: bool(received) and received[-1]["id"] >= last, "events went missing")
        reader.response.close()
        reader.join(30)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
    ids = [m["id"] for m in received]
    assert ids == list(range(1, last + 1))  # every event, once, in order, across the kill
    assert [m["id"] for m in received] == [m["seq"] for m in received]
    keys = {m["dedupe_key"] for m in received}
    assert any(k.startswith("w:a-") for k in keys)
    assert any(k.startswith("w:b-") for k in keys)  # both processes' writes are in it
    # the database is the reference (both servers are stopped by now)
    backend = open_backend(db_url)
    try:
        stored = events.page(backend, 0, 10**6)
    finally:
        backend.close()
    assert [(e["seq"], e["dedupe_key"]) for e in stored] == [
        (m["seq"], m["dedupe_key"]) for m in received
    ]


def _last_seq(url: str) -> int:
    r = requests.get(f"{url}/v1/events", params={"after": 0, "limit": 1}, timeout=10)
    return int(r.json()["last_seq"])


def test_stream_starts_after_last_event_id_or_after(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    for i in range(4):
        requests.post(f"{s.url}/v1/items", json=make_item(str(i)), timeout=10)
    for headers, params, first in (
        ({"Last-Event-ID": "2"}, {}, 3),
        ({}, {"after": "1"}, 2),
        ({"Last-Event-ID": "3"}, {"after": "0"}, 4),  # the header wins: it is the resume
    ):
        received: list[dict[str, Any]] = []
        r = requests.get(
            f"{s.url}/v1/events/stream", headers=headers, params=params, stream=True, timeout=30
        )
        try:
            for message in _sse(r):
                received.append(message)
                if message["id"] == 4:
                    break
        finally:
            r.close()
        assert [m["id"] for m in received] == list(range(first, 5))
    for bad in ("-1", "x", "9" * 30):
        r = requests.get(f"{s.url}/v1/events/stream", headers={"Last-Event-ID": bad}, timeout=10)
        assert r.status_code == 422, bad


def test_a_reader_behind_retention_is_told_410(any_ingest_server: IngestServer) -> None:
    from framework_ingest import retention

    s = any_ingest_server
    for i in range(3):
        requests.post(f"{s.url}/v1/items", json=make_item(str(i)), timeout=10)
    retention.purge(s.store.backend, retention.RetentionPolicy(None, None, 0.0, None))
    requests.post(f"{s.url}/v1/items", json=make_item("3"), timeout=10)
    for route, headers in (
        ("/v1/events?after=1", {}),
        ("/v1/events/stream", {"Last-Event-ID": "2"}),
    ):
        r = requests.get(f"{s.url}{route}", headers=headers, timeout=10)
        assert r.status_code == 410, route
        assert r.json()["oldest_after"] == 3
    r = requests.get(f"{s.url}/v1/events?after=3", timeout=10)
    assert [e["seq"] for e in r.json()["events"]] == [4]
