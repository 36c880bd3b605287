"""Hostile clients against the real door: connections held open instead of used, bodies
that never finish, values that cannot be stored, bodies made to be expensive to parse,
files and addresses that expose the data. Each case goes through a real server (uvicorn
on 127.0.0.1, port 0): in a thread, or as ``framework ingest serve`` in a child process
where the case needs its own descriptor limit or memory figures."""

from __future__ import annotations

import json
import logging
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from framework_ingest.app import create_app
from framework_ingest.cli import beyond_loopback
from framework_ingest.db import open_backend
from framework_ingest.errors import IngestConfigError
from framework_ingest.limits import BodyLimits, ServerLimits
from framework_ingest.serve import BackgroundServer
from framework_ingest.validate import MAX_DEPTH, ItemInvalid

from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer, make_item
from tests.fixtures.wait import wait_for

FRAMEWORK = str(Path(sys.executable).parent / "framework")


# -- helpers -------------------------------------------------------------------------


@pytest.fixture
def guarded_server(
    make_ingest_db_url: Callable[[str], str],
) -> Iterator[Callable[..., BackgroundServer]]:
    """Factory: a server with the given :class:`ServerLimits` and app options."""
    started: list[BackgroundServer] = []

    def make(limits: ServerLimits, backend: str = "sqlite", **app_options: Any) -> BackgroundServer:
        app = create_app(make_ingest_db_url(backend), **app_options)
        server = BackgroundServer(app, limits=limits, log_level="info").start()
        started.append(server)
        return server

    yield make
    for server in reversed(started):
        server.stop()


def connect(server: BackgroundServer) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=10)


def read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when (seconds
    from now); fails if it is still open after ``within`` seconds."""
    start = time.monotonic()
    deadline = start + within
    received = b""
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"still open after {within}s; received {received[:200]!r}"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            continue
        if not chunk:
            return received, time.monotonic() - start
        received += chunk


def is_closed(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (without waiting)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


def head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def nested(depth: int) -> dict[str, Any]:
    """``data`` nesting ``depth`` levels, itself the first."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def deep_item_json(source_id: str, depth: int) -> str:
    """An item whose ``data`` nests ``depth`` levels, as JSON text (written by hand:
    json.dumps runs out of recursion where the server must not)."""
    data = '{"n":' * (depth - 1) + '{"leaf":1}' + "}" * (depth - 1)
    return json.dumps(make_item(source_id, data={})).replace('"data": {}', f'"data": {data}')


# -- connections held open (bare connects, trickled heads, unfinished bodies) ---------


def test_a_bare_connect_is_closed_after_the_header_timeout(
    guarded_server: Callable[..., BackgroundServer],
) -> None:
    s = guarded_server(ServerLimits(timeout_header=0.5))
    sock = connect(s)
    received, after = read_until_closed(sock, within=10)
    sock.close()
    assert received == b""
    assert after >= 0.4
    assert s.guard.timed_out == 1


def test_a_trickled_head_does_not_move_its_deadline(
    guarded_server: Callable[..., BackgroundServer],
) -> None:
    s = guarded_server(ServerLimits(timeout_header=0.6, timeout_keep_alive=0.3))
    sock = connect(s)
    start = time.monotonic()
    line = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 10_000
    closed = False
    for byte in line:  # one byte per 0.05 s: never idle long enough for keep-alive
        try:
            sock.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        readable, _, _ = select.select([sock], [], [], 0.05)
        if readable and is_closed(sock):
            closed = True
            break
        assert time.monotonic() - start < 10, "a trickled head kept its connection"
    sock.close()
    assert closed
    assert 0.5 <= time.monotonic() - start < 5
    assert s.guard.timed_out == 1


def test_a_half_sent_body_is_answered_408_and_closed(
    guarded_server: Callable[..., BackgroundServer],
) -> None:
    s = guarded_server(ServerLimits(), bodies=BodyLimits(timeout=0.5))
    body = json.dumps(make_item("1")).encode()
    sock = connect(s)
    sock.sendall(head("/v1/items", len(body)) + body[:10])
    received, after = read_until_closed(sock, within=10)
    sock.close()
    assert status_of(received) == 408, received
    assert b"connection: close" in received.lower()
    problem = json.loads(received.split(b"\r\n\r\n", 1)[1])
    assert problem["type"] == "urn:framework:ingest:request-timeout"
    assert 0.4 <= after < 5
    assert requests.get(f"{s.url}/v1/items/test:1", timeout=10).status_code == 404


def test_a_client_gone_mid_body_is_one_info_line(
    guarded_server: Callable[..., BackgroundServer], caplog: pytest.LogCaptureFixture
) -> None:
    # uvicorn's loggers do not propagate; hand them the capture handler directly
    # (framework_ingest's reach it through the root logger).
    uvicorn_log = logging.getLogger("uvicorn")
    uvicorn_log.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG)
    try:
        s = guarded_server(ServerLimits())
        body = json.dumps([make_item(str(i)) for i in range(50)]).encode()
        sock = connect(s)
        sock.sendall(head("/v1/items/batch", len(body)) + body[: len(body) // 2])
        # the app reads what came, so the server is inside the request when we hang up
        wait_for(lambda: s.guard.count() == 1 and not s.guard.waiting, 10, "request started")
        sock.close()

        def gone() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "went away" in r.getMessage()]

        wait_for(lambda: bool(gone()), 10, "the line about the client that went away")
        # a healthy request afterwards: whatever the abandoned one logs is logged by now
        assert requests.get(f"{s.url}/healthz", timeout=10).status_code == 200
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    lines = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != "uvicorn.access"]
    about = [r for r in lines if "/v1/items/batch" in r.getMessage() or r.exc_info]
    assert [r.levelname for r in about] == ["INFO"], [r.getMessage() for r in about]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert s.guard.count() <= 1


def test_idle_connections_beyond_the_limit_close_the_oldest(
    guarded_server: Callable[..., BackgroundServer],
) -> None:
    s = guarded_server(ServerLimits(limit_connections=8))
    idle = []
    for _ in range(20):
        idle.append(connect(s))
    r = requests.get(f"{s.url}/healthz", timeout=5)
    assert r.status_code == 200
    wait_for(lambda: all(is_closed(c) for c in idle[:12]), 10, "the oldest idle ones closed")
    assert not any(is_closed(c) for c in idle[-4:])  # the newest stay
    assert s.guard.count() <= 8
    assert s.guard.shed == 0
    for c in idle:
        c.close()


def test_a_new_connection_is_answered_503_when_every_slot_is_busy(
    guarded_server: Callable[..., BackgroundServer],
) -> None:
    s = guarded_server(ServerLimits(limit_connections=2), bodies=BodyLimits(timeout=30))
    busy = []
    for _ in range(2):  # inside a request (their bodies never finish): not evictable
        sock = connect(s)
        sock.sendall(head("/v1/items", 1000) + b"{")
        busy.append(sock)
    wait_for(lambda: s.guard.count() == 2 and not s.guard.waiting, 10, "two requests started")
    newcomer = connect(s)
    received, _ = read_until_closed(newcomer, within=10)
    newcomer.close()
    assert status_of(received) == 503, received
    assert b"retry-after: 1" in received.lower()
    assert not any(is_closed(c) for c in busy)
    for c in busy:
        c.close()


def test_requests_beyond_limit_concurrency_answer_503(
    guarded_server: Callable[..., BackgroundServer],
) -> None:
    s = guarded_server(ServerLimits(limit_concurrency=2), bodies=BodyLimits(timeout=30))
    busy = []
    for _ in range(2):
        sock = connect(s)
        sock.sendall(head("/v1/items", 1000) + b"{")
        busy.append(sock)
    wait_for(lambda: s.guard.count() == 2 and not s.guard.waiting, 10, "two requests started")
    r = requests.get(f"{s.url}/healthz", timeout=5)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert r.headers["content-type"] == "application/problem+json"
    for c in busy:
        c.close()
    wait_for(
        lambda: requests.get(f"{s.url}/healthz", timeout=5).status_code == 200,
        10,
        "the slots freed",
    )


SERVE_WITH_256_DESCRIPTORS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
sys.argv = ["framework"] + sys.argv[1:]
from framework.cli import main
sys.exit(main())
"""


def _serve_child(tmp_path: Path, *options: str) -> tuple[Any, str]:
    """``framework ingest serve`` in a child with 256 descriptors; its URL."""
    proc = procs.popen(
        [
            sys.executable,
            "-c",
            SERVE_WITH_256_DESCRIPTORS,
            "ingest",
            "serve",
            "--db",
            f"sqlite:///{tmp_path / 'door.db'}",
            "--port",
            "0",
            "--no-access-log",
            *options,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    match = re.search(r"on (http://127\.0\.0\.1:\d+)", first)
    if not match:
        proc.kill()
        pytest.fail(f"the server did not start: {first!r}")
    url = match.group(1)
    wait_for(lambda: _healthy(url), 30, "the server answering")
    return proc, url


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


def _stop(proc: Any) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    return str(err)


@pytest.mark.process
@pytest.mark.kill
@pytest.mark.parametrize(
    ("options", "limit"),
    [
        # the default: half the 256 descriptors, derived from RLIMIT_NOFILE at start
        pytest.param((), 128, id="default-limit"),
        pytest.param(("--limit-connections", "64"), 64, id="explicit-limit"),
    ],
)
def test_500_idle_connections_under_ulimit_256_leave_healthz_answering(
    tmp_path: Path, options: tuple[str, ...], limit: int
) -> None:
    proc, url = _serve_child(tmp_path, "--timeout-header", "30", *options)
    host, port = url.removeprefix("http://").split(":")
    idle: list[socket.socket] = []
    try:
        for _ in range(500):
            idle.append(socket.create_connection((host, int(port)), timeout=10))
        # The server has taken every connect once the oldest idle ones it closed to make
        # room number 500 - limit; from then on, 500 clients hold a connection each
        # (the head deadline, 30 s here, closes none of them during the test).
        wait_for(
            lambda: sum(is_closed(c) for c in idle) >= len(idle) - limit,
            30,
            "the server taking every connect",
        )
        start = time.monotonic()
        r = requests.get(f"{url}/healthz", timeout=1)
        took = time.monotonic() - start
        assert r.status_code == 200
        assert took < 1
        r = requests.post(f"{url}/v1/items", json=make_item("1"), timeout=5)
        assert r.status_code == 201
        # never more held than the limit (the two requests took a slot each too)
        assert sum(not is_closed(c) for c in idle) <= limit
    finally:
        for c in idle:
            c.close()
        err = _stop(proc)
    assert "Too many open files" not in err
    assert "Traceback" not in err
    assert len(err) < 20_000, err[-2000:]


# -- values that cannot be stored: that element's 422, never the batch's 500 ----------

OUT_OF_RANGE = ["0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01"]


@pytest.mark.parametrize("scraped_at", OUT_OF_RANGE)
def test_a_time_out_of_range_in_utc_is_that_elements_422(
    any_ingest_server: IngestServer, scraped_at: str
) -> None:
    s = any_ingest_server
    batch = [make_item("a"), make_item("b", scraped_at=scraped_at), make_item("c")]
    r = requests.post(f"{s.url}/v1/items/batch", json=batch, timeout=10)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status_code"] for x in results] == [201, 422, 201]
    assert results[1]["problem"]["errors"][0]["field"] == "scraped_at"
    assert [row["dedupe_key"] for row in s.rows()] == ["test:a", "test:c"]

    r = requests.post(f"{s.url}/v1/items", json=make_item("d", scraped_at=scraped_at), timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "scraped_at"


def test_year_one_is_stored_at_fixed_width(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    item = make_item("y1", scraped_at="0001-01-01T00:01:00+00:01")
    assert requests.post(f"{s.url}/v1/items", json=item, timeout=10).status_code == 201
    stored = requests.get(f"{s.url}/v1/items/test:y1", timeout=10).json()
    assert stored["scraped_at"] == "0001-01-01T00:00:00.000000Z"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 960])
def test_nesting_is_bounded_the_same_on_every_route(
    any_ingest_server: IngestServer, depth: int
) -> None:
    s = any_ingest_server
    deepest = make_item("ok", data=nested(MAX_DEPTH))
    too_deep = deep_item_json("deep", depth)
    headers = {"Content-Type": "application/json"}

    assert requests.post(f"{s.url}/v1/items", json=deepest, timeout=10).status_code == 201
    r = requests.get(f"{s.url}/v1/items/test:ok", timeout=10)
    assert r.status_code == 200
    assert r.json()["data"] == deepest["data"]

    r = requests.post(f"{s.url}/v1/items", data=too_deep, headers=headers, timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "data"

    batch = f"[{too_deep}, {json.dumps(make_item('next'))}]"
    r = requests.post(f"{s.url}/v1/items/batch", data=batch, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert [x["status_code"] for x in r.json()["results"]] == [422, 201]
    assert requests.get(f"{s.url}/v1/items/test:deep", timeout=10).status_code == 404
    assert requests.get(f"{s.url}/v1/items/test:next", timeout=10).status_code == 200

    # the cursor route: a member nested as deep is refused the same way, and the cursor
    # is not registered; one nested as deep as an item's data may be is only a bad body
    cursor = f"{s.url}/v1/events/consumers/reader"
    message = f"nests deeper than {MAX_DEPTH} levels"
    for field, body in [
        ("extra", f'{{"last_seq": 1, "extra": {"[" * depth}{"]" * depth}}}'),
        ("last_seq", f'{{"last_seq": {"[" * depth}{"]" * depth}}}'),
        ("", "[" * (depth + 1) + "]" * (depth + 1)),
    ]:
        r = requests.put(cursor, data=body, headers=headers, timeout=10)
        assert r.status_code == 422, r.text
        assert r.json()["errors"] == [{"field": field, "message": message}], body[:80]
    shallow = json.dumps({"last_seq": 1, "extra": nested(MAX_DEPTH)})
    r = requests.put(cursor, data=shallow, headers=headers, timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["message"] != message
    assert requests.get(f"{s.url}/v1/events/consumers", timeout=10).json()["consumers"] == []


# -- bodies made to be expensive ------------------------------------------------------


def _high_water_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    assert match, status
    return int(match.group(1)) / 1024


SIXTEEN_MIB = 16 * 1024 * 1024
JSON_HEADERS = {"Content-Type": "application/json"}


def _single_write_times(
    url: str, send_big: Callable[[requests.Session], int], senders: int = 3
) -> tuple[list[float], list[int]]:
    """How long each of 30 single writes took while ``senders`` clients send big bodies
    in a loop (``send_big`` sends one and gives its status), and those statuses."""
    stop = threading.Event()
    answered: list[int] = []

    def flood() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                answered.append(send_big(session))

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(senders)]
    for t in flooders:
        t.start()
    took = []
    try:
        # every sender is at it before the writes are timed
        wait_for(lambda: len(answered) >= senders, 60, "the big senders answered")
        with requests.Session() as session:
            for i in range(30):
                start = time.monotonic()
                r = session.post(f"{url}/v1/items", json=make_item(str(i)), timeout=30)
                took.append(time.monotonic() - start)
                assert r.status_code == 201
    finally:
        stop.set()
        for t in flooders:
            t.join(60)
    return took, answered


def _item_of(size: int, source_id: str = "big") -> bytes:
    """An item body of exactly ``size`` bytes (its ``data`` padded)."""
    item = make_item(source_id, data={"blob": ""})
    room = size - len(json.dumps(item).encode())
    item["data"]["blob"] = "x" * room
    body = json.dumps(item).encode()
    assert len(body) == size
    return body


@pytest.mark.process
@pytest.mark.kill
@pytest.mark.slow
def test_a_16_mib_single_item_is_refused_before_it_is_read(tmp_path: Path) -> None:
    body = _item_of(SIXTEEN_MIB)
    proc, url = _serve_child(tmp_path)
    try:
        before = _high_water_mb(proc.pid)
        # announced: 413 on Content-Length, before a byte of the body is read
        r = requests.post(f"{url}/v1/items", data=body, headers=JSON_HEADERS, timeout=30)
        assert r.status_code == 413, r.text
        assert r.json()["type"] == "urn:framework:ingest:too-large"
        assert r.json()["detail"] == "the body is larger than 2097152 bytes"
        # chunked (no length up front): 413 once the stream passes the cap
        pieces = (body[i : i + 65536] for i in range(0, len(body), 65536))
        r = requests.post(f"{url}/v1/items", data=pieces, headers=JSON_HEADERS, timeout=30)
        assert r.status_code == 413, r.text
        # the cursor, the other one-record write, is held to the same cap
        r = requests.put(
            f"{url}/v1/events/consumers/reader", data=body, headers=JSON_HEADERS, timeout=30
        )
        assert r.status_code == 413, r.text

        # three clients sending such bodies do not stall other clients' single writes
        def big(session: requests.Session) -> int:
            r = session.post(f"{url}/v1/items", data=body, headers=JSON_HEADERS, timeout=30)
            return r.status_code

        took, answered = _single_write_times(url, big)
        assert set(answered) == {413}
        # read whole and parsed, three such senders moved single writes from a p50 of 2 ms
        # to 218 ms (a maximum of 2 s)
        assert statistics.median(took) < 0.25, sorted(took)
        # read whole and parsed, each such body took ~80 MB more; refused unread, none
        grown = _high_water_mb(proc.pid) - before
        assert grown < 40, f"{grown:.0f} MB more at the high-water mark"
    finally:
        err = _stop(proc)
    assert "Traceback" not in err
    # nothing of the big item was stored; the timed writes were
    db = open_backend(f"sqlite:///{tmp_path / 'door.db'}")
    try:
        with db.transaction() as tx:
            keys = [row[0] for row in tx.execute("SELECT dedupe_key FROM items")]
    finally:
        db.close()
    assert "test:big" not in keys
    assert len(keys) == 30


def test_an_item_over_the_item_cap_is_refused_on_every_write_route(
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    cap = 4096
    s = make_ingest_server(max_item=cap)
    over, at = _item_of(cap + 1, "over"), _item_of(cap, "at")
    detail = f"the body is larger than {cap} bytes"

    r = requests.post(f"{s.url}/v1/items", data=over, headers=JSON_HEADERS, timeout=10)
    assert r.status_code == 413, r.text
    assert r.json()["detail"] == detail
    r = requests.post(f"{s.url}/v1/items", data=at, headers=JSON_HEADERS, timeout=10)
    assert r.status_code == 201, r.text

    # in a batch (whose body may be far bigger), the element alone: its 413, in place
    batch = b"[" + json.dumps(make_item("a")).encode() + b"," + over + b"," + at + b"]"
    assert len(batch) > cap
    r = requests.post(f"{s.url}/v1/items/batch", data=batch, headers=JSON_HEADERS, timeout=10)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status_code"] for x in results] == [201, 413, 200]
    assert results[1]["status"] == "invalid"
    assert results[1]["dedupe_key"] == "test:over"
    assert results[1]["problem"]["type"] == "urn:framework:ingest:too-large"
    assert (
        results[1]["problem"]["detail"]
        == f"this item is {cap + 1} bytes of JSON; at most {cap} per item"
    )
    assert [row["dedupe_key"] for row in s.rows()] == ["test:a", "test:at"]

    # counted in UTF-8 bytes, not characters
    wide = make_item("wide", data={"blob": ""})
    wide["data"]["blob"] = "é" * ((cap - len(json.dumps(wide).encode())) // 2 + 1)
    text = json.dumps(wide, ensure_ascii=False).encode()
    assert len(text.decode()) <= cap < len(text)
    r = requests.post(
        f"{s.url}/v1/items/batch", data=b"[" + text + b"]", headers=JSON_HEADERS, timeout=10
    )
    assert [x["status_code"] for x in r.json()["results"]] == [413]

    # a cursor body is one record too
    r = requests.put(
        f"{s.url}/v1/events/consumers/reader",
        data=b'{"last_seq": 0' + b" " * cap + b"}",
        headers=JSON_HEADERS,
        timeout=10,
    )
    assert r.status_code == 413, r.text


def test_the_default_item_cap_takes_a_record_at_the_crawlers_default_cap(
    ingest_server: IngestServer,
) -> None:
    # FRAMEWORK_MAX_ITEM_BYTES (1 MiB of stored JSON) in its envelope, as ship sends it
    s = ingest_server
    item = make_item("record", data={"blob": "x" * (1024 * 1024)})
    body = json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()
    assert len(body) > 1024 * 1024
    r = requests.post(f"{s.url}/v1/items", data=body, headers=JSON_HEADERS, timeout=30)
    assert r.status_code == 201, r.text


@pytest.mark.process
@pytest.mark.kill
@pytest.mark.slow
def test_a_16_mib_batch_of_empty_objects_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    body = b"[" + b"{}," * (16 * 1024 * 1024 // 3 - 1) + b"{}]"
    assert len(body) <= 16 * 1024 * 1024
    headers = {"Content-Type": "application/json"}
    proc, url = _serve_child(tmp_path)
    try:
        before = _high_water_mb(proc.pid)
        r = requests.post(f"{url}/v1/items/batch", data=body, headers=headers, timeout=30)
        assert r.status_code == 413
        assert r.json()["type"] == "urn:framework:ingest:batch-too-large"
        # decoded whole, the array took ~420 MB more; read and decoded as text, ~50 MB
        grown = _high_water_mb(proc.pid) - before
        assert grown < 150, f"{grown:.0f} MB more at the high-water mark"

        # three clients sending such bodies do not stall single writes
        def big(session: requests.Session) -> int:
            r = session.post(f"{url}/v1/items/batch", data=body, headers=headers, timeout=30)
            return r.status_code

        took, answered = _single_write_times(url, big)
        assert set(answered) == {413}
        # decoded whole on the event loop, each big body stalled every write ~1 s
        assert statistics.median(took) < 0.25, sorted(took)
    finally:
        err = _stop(proc)
    assert "Traceback" not in err


# -- files and addresses --------------------------------------------------------------


def test_the_database_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        backend = open_backend(f"sqlite:///{tmp_path / 'door.db'}")
    finally:
        os.umask(old)
    try:
        with backend.transaction() as tx:
            tx.execute("SELECT COUNT(*) FROM items")
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == ["door.db", "door.db-shm", "door.db-wal"]
        for name in names:
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
    finally:
        backend.close()


@pytest.mark.parametrize("linked", ["door.db", "door.db-wal"])
def test_a_database_behind_a_symlink_is_refused(tmp_path: Path, linked: str) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    (tmp_path / linked).symlink_to(target)
    with pytest.raises(IngestConfigError, match="symbolic link"):
        open_backend(f"sqlite:///{tmp_path / 'door.db'}")
    assert target.read_bytes() == b""


def test_which_hosts_are_beyond_loopback() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"):
        assert not beyond_loopback(host), host
    for host in ("0.0.0.0", "::", "192.0.2.1", "10.1.2.3", "example.org", "::ffff:10.0.0.1"):
        assert beyond_loopback(host), host


@pytest.mark.process
def test_serving_beyond_loopback_without_auth_warns_at_start(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is never a local address: the warning comes, then the bind
    # fails, and nothing listens beyond loopback during the test.
    def serve(*extra: str) -> subprocess.CompletedProcess[str]:
        return procs.run(
            [
                FRAMEWORK,
                "ingest",
                "serve",
                "--db",
                f"sqlite:///{tmp_path / 'door.db'}",
                "--host",
                "192.0.2.1",
                "--port",
                "0",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "DOOR_TOKEN": "t0ken-for-the-test"},
        )

    open_door = serve()
    assert open_door.returncode == 2, open_door.stderr
    assert re.search(r"WARNING: listening on 192\.0\.2\.1 without auth", open_door.stderr)
    assert "cannot listen on 192.0.2.1" in open_door.stderr

    with_token = serve("--token-env", "DOOR_TOKEN")
    assert with_token.returncode == 2, with_token.stderr
    assert "without auth" not in with_token.stderr


def test_a_value_too_deep_for_the_parser_is_that_fields_422_too() -> None:
    """Where the JSON parser itself runs out of recursion (how deep that is depends on
    the stack the request is parsed on), the value is that field's 422, and in a batch
    only that element's: never a 400 for the whole body."""
    from framework_ingest.validate import TooDeep, parse_batch, parse_json, prepare

    deep = deep_item_json("deep", 960).replace('"leaf"', '"[{le]af"')  # brackets as text
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)  # the parser gives up well before 960 levels
    try:
        single = parse_json(deep.encode())
        batch = parse_batch(f"[{deep}, {json.dumps(make_item('next'))}]".encode(), 10)
    finally:
        sys.setrecursionlimit(limit)
    assert single == TooDeep("data")
    with pytest.raises(ItemInvalid) as refused:
        prepare(single)
    assert refused.value.problem["errors"] == [
        {"field": "data", "message": f"nests deeper than {MAX_DEPTH} levels"}
    ]
    assert batch[0] == TooDeep("data")
    assert batch[1]["dedupe_key"] == "test:next"
