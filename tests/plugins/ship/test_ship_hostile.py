"""`framework ship` against hostile parts, through the real CLI: an endpoint that drips
a byte a second, a gigabyte error body, a SIGTERM during a drip, a copied spec naming
another host, a token about to cross the network in clear, and keys and server texts
carrying terminal escape sequences."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from framework_ship.endpoint import choose_endpoint, is_loopback, plain_http_warning

from framework.cli import main
from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.ship import Fault, FaultEndpoint, put_items
from tests.fixtures.wait import wait_for

FRAMEWORK = str(Path(sys.executable).parent / "framework")
REMOTE = "http://ingest.example.test"  # never resolved: reached through a proxy, or refused

SPEC = """\
name: job
source_type: test
start_urls: [http://127.0.0.1:9/]
detail:
  id: {{css: "#id::text"}}
  fields:
    title: "h1::text"
ship:
  endpoint: {endpoint}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "home"
    (root / "projects").mkdir(parents=True)
    monkeypatch.setenv("FRAMEWORK_HOME", str(root))
    for name in ("FRAMEWORK_SHIP_ENDPOINT", "FRAMEWORK_SHIP_TOKEN_ENV", "FRAMEWORK_STOP_GRACE"):
        monkeypatch.delenv(name, raising=False)
    return root


def ship(*args: str) -> int:
    return main(["ship", *args])


def log_lines(ws: Workspace) -> list[dict[str, object]]:
    path = ws.path / "ship-log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# A raw endpoint: it reads one request, then answers however the test wants ------------
class RawEndpoint:
    """A real TCP server on 127.0.0.1, port 0, that reads each request (headers and a
    Content-Length body) and hands the connection to ``answer``. ``closed`` is set when
    a write fails: the client went away."""

    def __init__(self, answer: Callable[[socket.socket, threading.Event], None]) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests = 0
        self.times: list[float] = []  # time.monotonic() of each request read
        self.closed = threading.Event()
        self.stopping = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk
        self.requests += 1
        self.times.append(time.monotonic())
        try:
            self._answer(conn, self.stopping)
        except OSError:
            self.closed.set()

    def close(self) -> None:
        self.stopping.set()
        self._listener.close()
        for conn in self._conns:
            conn.close()


def drip(phase: str) -> Callable[[socket.socket, threading.Event], None]:
    """A status line (and in ``body`` whole headers promising 1000 bytes), then one
    byte a second, forever: every read gets a byte long before any read timeout."""

    def answer(conn: socket.socket, stopping: threading.Event) -> None:
        if phase == "headers":
            conn.sendall(b"HTTP/1.1 201 Created\r\nX-Drip: ")
        else:
            conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 1000\r\n\r\n")
        while not stopping.wait(1.0):
            conn.sendall(b"x")

    return answer


def huge_error(conn: socket.socket, stopping: threading.Event) -> None:
    """A 500 whose body is 1 GiB, sent as fast as the client takes it."""
    size = 1 << 30
    conn.sendall(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\n\r\n" % size
    )
    chunk = b"0123456789abcdef" * 65536  # 1 MiB
    for _ in range(size // len(chunk)):
        if stopping.is_set():
            return
        conn.sendall(chunk)


@pytest.fixture
def raw_endpoint() -> Iterator[Callable[..., RawEndpoint]]:
    made: list[RawEndpoint] = []

    def make(answer: Callable[[socket.socket, threading.Event], None]) -> RawEndpoint:
        made.append(RawEndpoint(answer))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


# 5: a total deadline per request ---------------------------------------------------------
@pytest.mark.parametrize(
    ("phase", "batch_size", "concurrency"),
    [("headers", "1", "1"), ("body", "1", "1"), ("body", "3", "2")],
    ids=["drip-headers-inline", "drip-body-inline", "drip-body-batch-threads"],
)
def test_a_dripping_endpoint_is_abandoned_within_the_timeout(
    make_ship_workspace: Callable[..., Workspace],
    raw_endpoint: Callable[..., RawEndpoint],
    home: Path,
    phase: str,
    batch_size: str,
    concurrency: str,
) -> None:
    """A byte every second resets every read timeout: only a deadline on the whole
    exchange ends it. The run ends within --timeout + 1 s of sending, exit 3, the
    attempt logged as a timeout, the connection closed, the ship lock free again."""
    ws = make_ship_workspace(int(batch_size))  # one request
    endpoint = raw_endpoint(drip(phase))
    timeout = 2.0
    code = ship("job", "--workspace", str(ws.path), "--endpoint", endpoint.url,
                "--timeout", str(timeout), "--max-attempts", "1",
                "--batch-size", batch_size, "--concurrency", concurrency)  # fmt: skip
    # From the request (not from the command's start: its first call in a process
    # imports the plugins) to the end of the run, summary and events written.
    elapsed = time.monotonic() - endpoint.times[-1]
    assert code == 3
    assert elapsed < timeout + 1.0, elapsed
    assert endpoint.requests == 1
    lines = log_lines(ws)
    assert lines, "the abandoned attempt is logged"
    assert {x["error_class"] for x in lines} == {"timeout"}
    assert all("--timeout 2 s" in str(x["detail"]) for x in lines)
    assert endpoint.closed.wait(10), "the dripping connection was never closed"
    with ws.lock("ship"):  # not held by a request left behind
        pass


def test_max_attempts_times_the_timeout_bounds_a_delivery(
    make_ship_workspace: Callable[..., Workspace],
    raw_endpoint: Callable[..., RawEndpoint],
    home: Path,
) -> None:
    """Retries do not stretch one attempt: three attempts against the drip take about
    three timeouts (plus the backoff), not the drip's forever."""
    ws = make_ship_workspace(1)
    endpoint = raw_endpoint(drip("body"))
    code = ship("job", "--workspace", str(ws.path), "--endpoint", endpoint.url,
                "--timeout", "1", "--max-attempts", "3", "--batch-size", "1")  # fmt: skip
    elapsed = time.monotonic() - endpoint.times[0]
    assert code == 3
    assert endpoint.requests == 3
    # 3 x 1 s, plus the backoffs (0.5 s + 1 s, each with up to 0.5 s jitter)
    assert elapsed < 3 * 1.0 + 2.5 + 1.0, elapsed
    assert [x["attempt"] for x in log_lines(ws)] == [1, 2, 3]


# 5: error bodies read up to a cap -------------------------------------------------------
def test_a_gigabyte_error_body_is_read_up_to_a_cap(
    make_ship_workspace: Callable[..., Workspace],
    raw_endpoint: Callable[..., RawEndpoint],
    home: Path,
) -> None:
    """The body is never read past 64 KiB: memory stays flat (the whole body was 2 GB
    of memory), the connection is dropped, the log quotes the start of the body."""
    ws = make_ship_workspace(1)
    endpoint = raw_endpoint(huge_error)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.monotonic()
    code = ship("job", "--workspace", str(ws.path), "--endpoint", endpoint.url,
                "--max-attempts", "1", "--batch-size", "1", "--timeout", "60")  # fmt: skip
    elapsed = time.monotonic() - started
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert code == 3
    assert grown_mib < 64, grown_mib
    assert elapsed < 10, elapsed
    (line,) = log_lines(ws)
    assert line["http_status"] == 500
    assert line["error_class"] == "http_5xx"
    assert "an answer over 65536 bytes" in str(line["detail"])
    assert "0123456789abcdef" in str(line["detail"])
    assert endpoint.closed.wait(10), "the rest of the body was not refused"


# 5: SIGTERM within the stop grace -------------------------------------------------------
@pytest.mark.process
@pytest.mark.kill
@pytest.mark.parametrize(
    ("batch_size", "concurrency"), [("1", "1"), ("2", "2")], ids=["inline", "worker-thread"]
)
def test_sigterm_abandons_a_dripping_request_within_the_stop_grace(
    make_ship_workspace: Callable[..., Workspace],
    raw_endpoint: Callable[..., RawEndpoint],
    home: Path,
    batch_size: str,
    concurrency: str,
) -> None:
    """One SIGTERM, no second: the request in flight gets --stop-grace seconds, then it
    is abandoned and logged, and the run ends (exit 3) long before its 600 s timeout,
    whether the main thread or a worker waits on the socket."""
    n = int(batch_size)
    ws = make_ship_workspace(2 * n)  # a second request would follow the first
    ws.close()
    endpoint = raw_endpoint(drip("body"))
    grace = 1.0
    proc = procs.popen(
        [FRAMEWORK, "ship", "job", "--workspace", str(ws.path), "--endpoint", endpoint.url,
         "--batch-size", batch_size, "--concurrency", concurrency, "--timeout", "600",
         "--stop-grace", str(grace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FRAMEWORK_HOME": str(home)},
    )  # fmt: skip
    wait_for(  # every worker waits on a drip
        lambda: endpoint.requests >= int(concurrency),
        60,
        "the shipper sending",
        alive=lambda: proc.poll() is None or pytest.fail("the shipper exited"),
    )
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - signalled
    assert proc.returncode == 3, err
    assert elapsed < grace + 2.0, elapsed
    assert "it gets 1 s more (--stop-grace)" in err
    lines = [json.loads(x) for x in (ws.path / "ship-log.jsonl").read_text().splitlines()]
    assert [x["error_class"] for x in lines] == ["abandoned"] * n * int(concurrency)
    assert endpoint.requests == int(concurrency)  # nothing new started after the signal
    events = [json.loads(x) for x in (ws.path / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "ship_finished"
    assert events[-1]["reason"] == "interrupted (SIGTERM)"
    assert "interrupted (SIGTERM)" in out


# 7: a copied spec's endpoint ------------------------------------------------------------
@pytest.fixture
def proxied(fault_endpoint: FaultEndpoint, monkeypatch: pytest.MonkeyPatch) -> FaultEndpoint:
    """The fault endpoint as the HTTP proxy: REMOTE, a host that is not this machine,
    is then reachable, and whatever is sent to it is seen."""
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", fault_endpoint.url)
    monkeypatch.setenv("http_proxy", fault_endpoint.url)
    return fault_endpoint


def write_spec(home: Path, endpoint: str) -> None:
    (home / "projects" / "job").mkdir(exist_ok=True)
    (home / "projects" / "job" / "job.yaml").write_text(SPEC.format(endpoint=endpoint))


def test_a_copied_spec_cannot_send_the_harvest_to_another_host(
    make_ship_workspace: Callable[..., Workspace],
    proxied: FaultEndpoint,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace(2)
    write_spec(home, REMOTE + "/v1/items")
    args = ("job", "--workspace", str(ws.path))
    assert ship(*args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert "ship.endpoint sends to ingest.example.test, not to this machine" in err
    assert "--endpoint URL" in err
    assert "FRAMEWORK_SHIP_ENDPOINT" in err
    # The operator's environment naming another endpoint does not confirm it either.
    monkeypatch.setenv("FRAMEWORK_SHIP_ENDPOINT", "https://ours.example.test")
    assert ship(*args) == 2
    assert "names another one, ours.example.test" in capsys.readouterr().err
    assert proxied.requests == []
    assert log_lines(ws) == []
    # A dry run names the endpoint and says a real run would refuse it.
    assert ship(*args, "--dry-run") == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"endpoint {REMOTE}/v1/items"
    assert "a real run refuses this endpoint" in captured.err
    # Confirmed by the environment (same origin): used, and the spec's path with it.
    monkeypatch.setenv("FRAMEWORK_SHIP_ENDPOINT", REMOTE)
    assert ship(*args) == 0
    assert sorted(proxied.rows) == ["test:000000", "test:000001"]
    assert {r.path for r in proxied.requests} == {f"{REMOTE}/v1/items/batch"}
    # Or by --endpoint, which replaces it.
    monkeypatch.delenv("FRAMEWORK_SHIP_ENDPOINT")
    ws2 = make_ship_workspace(1, name="ws2")
    assert ship("job", "--workspace", str(ws2.path), "--endpoint", REMOTE + "/other") == 0
    assert proxied.requests[-1].path == f"{REMOTE}/other"


def test_a_spec_endpoint_on_this_machine_needs_no_confirmation(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace(1)
    write_spec(home, fault_endpoint.url.replace("127.0.0.1", "localhost"))
    assert ship("job", "--workspace", str(ws.path)) == 0
    assert fault_endpoint.rows
    assert "warning" not in capsys.readouterr().err


def test_a_token_over_plain_http_to_another_host_gets_a_warning(
    make_ship_workspace: Callable[..., Workspace],
    proxied: FaultEndpoint,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = "tok-plain-http-7"
    monkeypatch.setenv("INGEST_TOKEN", token)
    ws = make_ship_workspace(1)
    args = ("job", "--workspace", str(ws.path), "--token-env", "INGEST_TOKEN")
    assert ship(*args, "--endpoint", REMOTE) == 0
    err = capsys.readouterr().err
    assert (
        "warning: the bearer token goes to ingest.example.test over plain http: anyone "
        "on the way can read it (and the items); use https\n"
    ) in err
    assert token not in err
    assert proxied.requests[-1].headers["Authorization"] == f"Bearer {token}"
    # Not to this machine, not over https (a dry run: nothing is sent).
    assert ship(*args, "--endpoint", proxied.url) == 0
    assert ship(*args, "--endpoint", "https://ingest.example.test", "--dry-run") == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8700", True),
        ("http://127.8.9.10/v1/items", True),
        ("http://localhost:8700", True),
        ("http://LOCALHOST", True),
        ("http://[::1]:8700", True),
        ("http://[::ffff:127.0.0.1]:8700", True),
        ("http://localhost.example.test", False),
        ("http://127.0.0.1.example.test", False),
        ("http://0.0.0.0:8700", False),
        ("http://10.0.0.1", False),
        ("https://ingest.example.org", False),
    ],
)
def test_what_counts_as_this_machine(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback
    assert (choose_endpoint(None, url, None).refused is None) is loopback
    assert (plain_http_warning(url, "t") is None) is (loopback or url.startswith("https"))


def test_a_confirmation_is_for_one_origin() -> None:
    spec = "https://ingest.example.org/v1/items"
    assert choose_endpoint(None, spec, "https://ingest.example.org").refused is None
    assert choose_endpoint(None, spec, "https://ingest.example.org:443/x").refused is None
    for other in ("http://ingest.example.org", "https://ingest.example.org:8443",
                  "https://evil.example.org"):  # fmt: skip
        assert choose_endpoint(None, spec, other).refused is not None, other
    assert choose_endpoint("https://x.example", spec, None).url == "https://x.example"
    assert choose_endpoint(None, None, "https://e.example").url == "https://e.example"


# 11: site-chosen text on the terminal ---------------------------------------------------
EVIL_ID = "k\x1b]0;owned\x07\x1b[2J\u202e\nship     forged"


def test_dry_run_shows_site_chosen_keys_escaped(
    make_ship_workspace: Callable[..., Workspace],
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace(1)
    put_items(ws, {EVIL_ID: {"title": "x"}})
    assert ship("job", "--workspace", str(ws.path), "--dry-run") == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in out
    lines = out.splitlines()
    assert lines[0].startswith("endpoint (none: a real run needs --endpoint")
    assert [line.split()[0] for line in lines[1:-1]] == ["ship", "ship"]  # nothing forged
    assert r"test:k\x1b]0;owned\x07\x1b[2J\u202e\x0aship     forged" in out


def test_a_servers_text_and_a_key_are_escaped_in_the_rejection_notice(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace()
    put_items(ws, {EVIL_ID: {"title": "x"}})
    fault_endpoint.script(
        "/v1/items", Fault(status=422, body={"detail": "bad \x1b[31mred\x1b[0m\r\nforged"})
    )
    code = ship("job", "--workspace", str(ws.path), "--endpoint", fault_endpoint.url,
                "--batch-size", "1")  # fmt: skip
    assert code == 4
    captured = capsys.readouterr()
    for raw in ("\x1b", "\x07", "\r", "\u202e"):
        assert raw not in captured.out + captured.err
    assert r"bad \x1b[31mred\x1b[0m\x0d\x0aforged" in captured.err
    assert r"rejected test:k\x1b]0;owned" in captured.err


# 1: a copied workspace holding symlinks -------------------------------------------------
@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask most systems start with (0022): a file it made would be 0644."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# What each link points at: a non-empty file for the lock (a lock truncates it) and the
# log (appended to); an empty one for the index and its journal, which SQLite would
# take for a new database (16 KiB of its pages written there).
LINKED = [
    ("ship.lock", b"# my shell rc\nexport PATH=/bin\n"),
    ("ship-log.jsonl", b"# my shell rc\nexport PATH=/bin\n"),
    ("ship-index.sqlite", b""),
    ("ship-index.sqlite-journal", b""),
]


@pytest.mark.parametrize(("name", "content"), LINKED, ids=[n for n, _ in LINKED])
def test_nothing_is_written_through_a_symlink_in_a_copied_workspace(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: bytes,
) -> None:
    """`ship --workspace DIR` on a copy holding a link named like one of the ship's
    files: one line naming it, exit 2, nothing sent, and the target keeps every byte."""
    ws = make_ship_workspace(3)
    args = ("job", "--workspace", str(ws.path), "--endpoint", fault_endpoint.url)
    assert ship(*args) == 0  # the ship's files exist, as in a copied workspace
    put_items(ws, {"new": {"title": "new"}})  # something left to ship
    sent, lines = len(fault_endpoint.requests), len(log_lines(ws))
    target = tmp_path / "bashrc"
    target.write_bytes(content)
    (ws.path / name).unlink(missing_ok=True)
    (ws.path / name).symlink_to(target)
    capsys.readouterr()

    assert ship(*args) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: {ws.path / name} is a symbolic link: the framework never writes through "
        "one (it would write wherever the link points); replace it with a file or remove it"
    ]
    assert target.read_bytes() == content
    assert (ws.path / name).is_symlink()  # not replaced, not deleted
    assert len(fault_endpoint.requests) == sent
    if name != "ship-log.jsonl":
        assert len(log_lines(ws)) == lines


def test_a_dry_run_reads_the_log_past_a_linked_index(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dry run only reads: a linked index is neither refused nor read (the log is)."""
    ws = make_ship_workspace(2)
    assert ship("job", "--workspace", str(ws.path), "--endpoint", fault_endpoint.url) == 0
    target = tmp_path / "other.sqlite"
    target.write_bytes(b"")
    (ws.path / "ship-index.sqlite").unlink()
    (ws.path / "ship-index.sqlite").symlink_to(target)
    capsys.readouterr()
    assert ship("job", "--workspace", str(ws.path), "--dry-run") == 0
    assert "0 would ship, 2 skipped" in capsys.readouterr().out  # from the log
    assert target.read_bytes() == b""


def test_the_ship_log_and_index_are_created_private(
    open_umask: None,
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
) -> None:
    ws = make_ship_workspace(2)
    assert ship("job", "--workspace", str(ws.path), "--endpoint", fault_endpoint.url) == 0
    for name in ("ship.lock", "ship-log.jsonl", "ship-index.sqlite"):
        assert (ws.path / name).stat().st_mode & 0o777 == 0o600, name
    assert not (ws.path / "ship-index.sqlite-journal").exists()
