"""Benchmark: items/s through the ingest endpoint beside the raw SQL upsert rate.

Runs the real ``framework ingest serve`` (a separate process, access log off) on SQLite
and on PostgreSQL, and drives it with 1 and 8 client threads, one item per request and in
batches of 100 (bodies encoded before the clock starts; ``http.client`` keep-alive
connections, so the client costs little). Beside it, in the same run, the raw rate of
the same upsert statement on the same kind of database with one commit per row.

    .venv/bin/python bench/bench_ingest.py                      # SQLite, and PostgreSQL
    .venv/bin/python bench/bench_ingest.py --pg postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/bench_ingest.py --quick              # smaller counts
    .venv/bin/python bench/bench_ingest.py --http httptools --loop uvloop \
        --server-pythonpath /tmp/fastpkgs     # accelerators from pip install --target

PostgreSQL runs when ``--pg`` or ``$FRAMEWORK_TEST_PG`` names a server; the benchmark
creates a database of its own there and drops it afterwards.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from framework_ingest.db import open_backend, utcnow
from framework_ingest.store import UPSERT

FRAMEWORK = str(Path(sys.executable).parent / "framework")


def item(prefix: str, n: int) -> dict[str, object]:
    return {
        "dedupe_key": f"bench:{prefix}-{n}",
        "source_type": "bench",
        "source_id": f"{prefix}-{n}",
        "content_hash": f"sha256:{n:064x}",
        "scraped_at": "2026-01-01T00:00:00Z",
        "data": {
            "title": f"Case {n}",
            "court": "Regional",
            "amount": n * 1.5,
            "tags": ["a", "b"],
            "filed": "2025-12-31",
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, db_url: str, parser: str, loop: str, pythonpath: str | None) -> None:
        self.port = free_port()
        env = dict(os.environ)
        if pythonpath:  # optional accelerators, tried without installing them in .venv
            env["PYTHONPATH"] = pythonpath
        self.proc = subprocess.Popen(
            [
                FRAMEWORK,
                "ingest",
                "serve",
                "--db",
                db_url,
                "--port",
                str(self.port),
                "--no-access-log",
                "--max-batch",
                "500",
                "--http",
                parser,
                "--loop",
                loop,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def drive(port: int, bodies: list[tuple[str, bytes, int]], threads: int) -> float:
    """POST every (path, body, n_items) over ``threads`` keep-alive connections; items/s."""
    shares = [bodies[i::threads] for i in range(threads)]
    errors: list[str] = []
    start = threading.Barrier(threads + 1)

    def client(share: list[tuple[str, bytes, int]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Content-Type": "application/json"}
        start.wait()
        for path, body, _ in share:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status not in (200, 201):
                errors.append(f"{path} -> {response.status}")
        conn.close()

    workers = [threading.Thread(target=client, args=(s,)) for s in shares]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[0]}")
    return sum(n for _, _, n in bodies) / elapsed


def raw_rate(db_url: str, rows: int) -> float:
    """The same upsert statement, one commit per row, straight to the database."""
    backend = open_backend(db_url)  # creates the schema (and trigger) like the server
    backend.close()
    params = [
        (
            f"bench:raw-{n}",
            "bench",
            f"raw-{n}",
            f"sha256:{n:064x}",
            "2026-01-01T00:00:00.000000Z",
            json.dumps(item("raw", n)["data"], separators=(",", ":")),
            utcnow(),
            utcnow(),
        )
        for n in range(rows)
    ]
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url[len("sqlite:///") :], isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        t0 = time.perf_counter()
        for p in params:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(UPSERT, p).fetchall()
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - t0
        conn.close()
    else:
        import psycopg

        sql = UPSERT.replace("?", "%s")
        with psycopg.connect(db_url, autocommit=True) as pg:
            t0 = time.perf_counter()
            for p in params:
                pg.execute(sql, p).fetchall()  # autocommit: one commit per row
            elapsed = time.perf_counter() - t0
    return rows / elapsed


def bench_database(
    label: str, db_url: str, args: argparse.Namespace
) -> list[tuple[str, str, float]]:
    scale = 1 if not args.quick else 4
    out: list[tuple[str, str, float]] = []
    out.append((label, "raw upsert, commit per row", raw_rate(db_url, 8000 // scale)))
    server = Server(db_url, args.http, args.loop, args.server_pythonpath)
    try:
        for threads in (1, 8):
            n = (1500 if threads == 1 else 3000) // scale
            prefix = f"single{threads}"
            bodies = [("/v1/items", json.dumps(item(prefix, i)).encode(), 1) for i in range(n)]
            out.append(
                (label, f"HTTP single, {threads} thread(s)", drive(server.port, bodies, threads))
            )
            n = (20000 if threads == 1 else 40000) // scale
            prefix = f"batch{threads}"
            bodies = [
                (
                    "/v1/items/batch",
                    json.dumps([item(prefix, i) for i in range(b, b + 100)]).encode(),
                    100,
                )
                for b in range(0, n, 100)
            ]
            out.append(
                (
                    label,
                    f"HTTP batch of 100, {threads} thread(s)",
                    drive(server.port, bodies, threads),
                )
            )
    finally:
        server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=os.environ.get("FRAMEWORK_TEST_PG"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    parser.add_argument("--http", choices=["h11", "httptools"], default="h11")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--server-pythonpath", help="PYTHONPATH of the server process")
    args = parser.parse_args()
    results: list[tuple[str, str, float]] = []
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            results += bench_database("SQLite (WAL)", f"sqlite:///{tmp}/bench.db", args)
    if args.pg and args.only in (None, "postgresql"):
        import psycopg

        name = f"framework_ingest_bench_{secrets.token_hex(3)}"
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(args.pg)
        url = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))
        try:
            results += bench_database("PostgreSQL", url, args)
        finally:
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"server: uvicorn --http {args.http} --loop {args.loop}")
    print(f"{'database':<14} {'path':<34} {'items/s':>10} {'of raw':>7}")
    raw: dict[str, float] = {}
    for label, what, rate in results:
        raw.setdefault(label, rate)
        print(f"{label:<14} {what:<34} {rate:>10,.0f} {rate / raw[label]:>7.0%}")


if __name__ == "__main__":
    main()
