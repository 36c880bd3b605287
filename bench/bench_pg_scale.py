"""A simulated 10-million-row job on a PostgreSQL workspace: claims and status reads.

Issue 14 asks that claiming and ``framework status`` stay fast on a job of millions of
pages. Crawling ten million pages is not possible here, so the rows are written
directly (``generate_series`` in the database, no Python per row) into the tables of a
real workspace (``PostgresStore.open`` creates the schema), in the shape a crawl leaves
them in:

* kinds: ``list`` (1%), ``detail`` (~79%), ``detail.documents`` (20%, a required
  sub-tab naming its detail's item);
* status: ok 97%, pending 2%, error 1% (half retryable after one attempt, half
  exhausted after 3), spread evenly over the ids;
* one ``attempts`` row per attempt (an ok one per ok row, 1 or 3 failed ones per error
  row, a failed one before the ok for 1% of the ok rows), one item per ok detail row
  (complete unless its sub-tab is not ok), no stored responses, no holds.

Then ``measure`` times, alternating rounds, each read ``framework status`` makes of the
store (row_counts, counts, item_counts, incomplete_keys, exhausted, misbehaving,
fill_counts, hold_counts, leased_rows/workers) and ``PgLeases.claim`` of N rows by one
claimer and by several at once (threads, one connection each: each claims, commits its
rows as ok pages with an item and a stored body, claims again). ``load`` times the same
claim/commit/heartbeat loop per 1,000 pages and counts its statements, transactions
and tuples (``pg_stat_database`` deltas).

    .venv/bin/python bench/bench_pg_scale.py build postgresql://postgres@127.0.0.1/b27 --rows 10000000
    .venv/bin/python bench/bench_pg_scale.py measure postgresql://postgres@127.0.0.1/b27
    .venv/bin/python bench/bench_pg_scale.py load postgresql://postgres@127.0.0.1/b27

``build`` refuses a database that already has rows. ``measure`` and ``load`` change the
job (they commit the pending rows they claim): run them on a scratch database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from framework.workspace.postgres import PostgresStore
from framework.workspace.postgres_leases import PgLeases, leased_rows, workers
from framework.workspace.records import ItemWrite, NewRow, Outcome, ResponseWrite

MAX_ATTEMPTS = 3
CHUNK_ROWS = 500_000

# One statement per chunk of ids; %(lo)s/%(hi)s bound it. The shape is described in the
# module docstring; every choice is a function of the id so a rebuild is identical.
_ROWS_SQL = """
INSERT INTO rows (id, fingerprint, kind, url, method, status, attempts, retryable,
                  last_error_kind, last_error, last_http_status, context, item_key,
                  required, created_at, updated_at)
SELECT i,
       md5(i::text) || substr(md5('f' || i::text), 1, 8),
       CASE WHEN i %% 100 = 0 THEN 'list'
            WHEN i %% 10 IN (3, 7) THEN 'detail.documents' ELSE 'detail' END,
       'http://127.0.0.1:8000/cases/' || i,
       'GET',
       CASE WHEN (i * 7919) %% 1000 < 970 THEN 'ok'
            WHEN (i * 7919) %% 1000 < 990 THEN 'pending' ELSE 'error' END,
       CASE WHEN (i * 7919) %% 1000 < 970 THEN 1
            WHEN (i * 7919) %% 1000 < 990 THEN 0
            WHEN (i * 7919) %% 1000 < 995 THEN 1 ELSE 3 END,
       1,
       CASE WHEN (i * 7919) %% 1000 >= 990 THEN 'http_5xx' END,
       CASE WHEN (i * 7919) %% 1000 >= 990 THEN 'HTTP 503' END,
       CASE WHEN (i * 7919) %% 1000 < 970 THEN 200
            WHEN (i * 7919) %% 1000 >= 990 THEN 503 END,
       CASE WHEN i %% 10 IN (3, 7) AND i %% 100 <> 0
            THEN '{"item_key":"case-' || (i - 1) || '","required":true}' ELSE '{}' END,
       CASE WHEN i %% 10 IN (3, 7) AND i %% 100 <> 0 THEN 'case-' || (i - 1) END,
       CASE WHEN i %% 10 IN (3, 7) AND i %% 100 <> 0 THEN 1 ELSE 0 END,
       '2026-11-01T00:00:00.000+00:00',
       '2026-11-01T00:00:00.000+00:00'
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS i
"""

_ATTEMPTS_SQL = """
INSERT INTO attempts (row_id, n, attempt, time, outcome, http_status, error_kind, error)
SELECT r.id, a.n, a.n, '2026-11-01T00:00:00.000+00:00',
       CASE WHEN r.status = 'ok' AND a.n = a.last THEN 'ok' ELSE 'error' END,
       CASE WHEN r.status = 'ok' AND a.n = a.last THEN 200 ELSE 503 END,
       CASE WHEN r.status = 'ok' AND a.n = a.last THEN NULL ELSE 'http_5xx' END,
       CASE WHEN r.status = 'ok' AND a.n = a.last THEN NULL ELSE 'HTTP 503' END
FROM rows r
CROSS JOIN LATERAL (
    SELECT n, last FROM (SELECT CASE WHEN r.status = 'ok' AND r.id %% 100 = 1 THEN 2
                                     ELSE r.attempts END AS last) l,
           generate_series(1, l.last) AS n
) a
WHERE r.id BETWEEN %(lo)s AND %(hi)s AND r.attempts > 0
"""

_ITEMS_SQL = """
INSERT INTO items (dedupe_key, source_type, source_id, data, content_hash, first_scraped,
                   last_scraped, complete, declared_complete, parts, row_id)
SELECT 'case-' || r.id, 'case', r.id::text,
       '{"court":"Court ' || (r.id %% 37) || '","date":"2020-01-' ||
       lpad(((r.id %% 28) + 1)::text, 2, '0') || '","documents":["doc-' || r.id ||
       '.pdf"],"parties":["A ' || r.id || '","B ' || r.id || '"],"summary":"' ||
       CASE WHEN r.id %% 5 = 0 THEN '' ELSE 'Summary of case ' || r.id END ||
       '","title":"Case ' || r.id || '"}',
       'sha256:' || md5(r.id::text) || md5('h' || r.id::text),
       '2026-11-01T00:00:00.000+00:00', '2026-11-01T00:00:00.000+00:00',
       CASE WHEN coalesce(t.status, 'ok') = 'ok' THEN 1 ELSE 0 END, 1, '["documents"]', r.id
FROM rows r LEFT JOIN rows t ON t.id = r.id + 1 AND t.kind = 'detail.documents'
WHERE r.id BETWEEN %(lo)s AND %(hi)s AND r.kind = 'detail' AND r.status = 'ok'
"""


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load_average()}] {text}", flush=True)


def build(url: str, n: int) -> None:
    """Write ``n`` rows, their attempts and items, chunk by chunk (each its own
    transaction, so progress shows and a chunk's WAL stays bounded)."""
    store = PostgresStore.open(url)
    conn = store._conn()
    if conn.execute("SELECT EXISTS (SELECT 1 FROM rows)").fetchone()[0]:  # type: ignore[index]
        raise SystemExit(f"{store.where}: has rows already; build into an empty database")
    started = time.perf_counter()
    for lo in range(1, n + 1, CHUNK_ROWS):
        hi = min(n, lo + CHUNK_ROWS - 1)
        t0 = time.perf_counter()
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(_ROWS_SQL, {"lo": lo, "hi": hi})
            conn.execute(_ATTEMPTS_SQL, {"lo": lo, "hi": hi})
            # an item needs its sub-tab row (id + 1): items of a chunk's last id wait
            conn.execute(_ITEMS_SQL, {"lo": lo, "hi": hi})
        say(f"rows {lo:,}-{hi:,} with attempts and items: {time.perf_counter() - t0:.1f} s")
    conn.execute("SELECT setval(pg_get_serial_sequence('rows', 'id'), %s)", (n,))
    for table in ("rows", "attempts", "items"):
        conn.execute(f"VACUUM ANALYZE {table}")
    say(f"built {n:,} rows in {time.perf_counter() - started:.0f} s")
    for table in ("rows", "attempts", "items"):
        size = conn.execute(
            "SELECT count(*), pg_size_pretty(pg_total_relation_size(%s)) FROM " + table,
            (table,),
        ).fetchone()
        say(f"{table}: {size[0]:,} rows, {size[1]} with indexes")  # type: ignore[index]
    store.close()


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - t0)


def summary(ms: list[float]) -> str:
    ms = sorted(ms)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    return (
        f"median {statistics.median(ms):8.2f} ms  p95 {p95:8.2f} ms  max {ms[-1]:8.2f} ms  "
        f"(n={len(ms)})"
    )


def page_outcome(row: Any, token: int | None) -> Outcome:
    """An ok page as the crawl commits it: a stored body, an attempt, an item for a
    detail row (a sub-tab or list page stores no item here)."""
    body = (f"<html><body><h1>Case {row.id}</h1>" + "<p>text</p>" * 100 + "</body></html>").encode()
    items: tuple[ItemWrite, ...] = ()
    if row.kind == "detail":
        items = (
            ItemWrite(
                dedupe_key=f"case-{row.id}",
                source_type="case",
                source_id=str(row.id),
                data={"title": f"Case {row.id}", "court": "Court 1", "date": "2020-01-01"},
            ),
        )
    return Outcome(
        row_id=row.id,
        ok=True,
        http_status=200,
        items=items,
        response=ResponseWrite(row.url, row.url, 200, "text/html; charset=utf-8", body),
        lease_token=token,
    )


def claim_round(url: str, claimers: int, claims_each: int, batch: int) -> list[float]:
    """``claimers`` threads, each with its own connection and worker: claim ``batch``,
    commit them as ok pages, again ``claims_each`` times. Returns the claim latencies."""
    latencies: list[float] = []
    guard = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(claimers)

    def worker() -> None:
        store = PostgresStore.open(url)
        leases = PgLeases(store, 30.0)
        leases.register()
        mine: list[float] = []
        try:
            barrier.wait()
            for _ in range(claims_each):
                t0 = time.perf_counter()
                rows = leases.claim(batch, MAX_ATTEMPTS)
                mine.append(1000 * (time.perf_counter() - t0))
                store.commit_many([page_outcome(r, leases.token(r.id)) for r in rows])
                for r in rows:
                    leases.done(r.id)
            leases.stop()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            store.close()
            with guard:
                latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return latencies


def counting(store: PostgresStore, read: Callable[[], Any]) -> Callable[[], Any]:
    """``read`` the way a schema 1 database is read (counting the tables)."""

    def slow() -> Any:
        store.schema_version = 1
        try:
            return read()
        finally:
            store.schema_version = 2

    return slow


def status_reads(store: PostgresStore) -> dict[str, Callable[[], Any]]:
    reads: dict[str, Callable[[], Any]] = {
        "row_counts": store.row_counts,
        "counts": lambda: store.counts(MAX_ATTEMPTS),
        "item_counts": store.item_counts,
        "incomplete_keys": lambda: store.incomplete_keys(21),
        "exhausted(10)": lambda: store.exhausted(MAX_ATTEMPTS, limit=10),
        "misbehaving(10)": lambda: store.misbehaving(10),
        "hold_counts": store.hold_counts,
        "workers+leased": lambda: (workers(store), leased_rows(store)),
        "fill_counts": store.fill_counts,
    }
    if getattr(store, "schema_version", 1) >= 2:  # the same reads by counting, alternated
        for name in ("row_counts", "counts", "item_counts", "fill_counts"):
            reads[f"{name} (counting)"] = counting(store, reads[name])
    return reads


def measure(url: str, rounds: int, batch: int, claims: int, skip: set[str]) -> None:
    t0 = time.perf_counter()
    store = PostgresStore.open(url)  # a schema 1 database is migrated here
    say(f"opened (migrated when older) in {time.perf_counter() - t0:.1f} s")
    conn = store._conn()
    version = store.get_meta("schema_version")
    total = conn.execute("SELECT max(id) FROM rows").fetchone()[0]  # type: ignore[index]
    say(f"workspace: schema {version}, {total:,} rows; {rounds} rounds, claims of {batch}")
    reads = {k: v for k, v in status_reads(store).items() if k not in skip}
    got: dict[str, list[float]] = {name: [] for name in reads}
    claim_ms: dict[int, list[float]] = {1: [], 4: []}
    for r in range(rounds):
        for name, fn in reads.items():
            got[name].append(timed(fn))
        for n in claim_ms:
            claim_ms[n] += claim_round(url, n, max(1, claims // n), batch)
        say(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in got.items()) + " ms")
    for name, ms in got.items():
        say(f"{name:16s} {summary(ms)}")
    for n, ms in claim_ms.items():
        say(f"claim({batch}) x{n} claimer(s) {summary(ms)}")
    store.close()


class Counted:
    """Counts the statements this process sends (psycopg's execute and executemany,
    each parameter set of an executemany counted as one)."""

    def __init__(self) -> None:
        import psycopg

        self.n = 0
        self._patched: list[tuple[Any, str, Any]] = []
        # Connection.execute goes through Cursor.execute: only the cursor is counted
        cls = psycopg.Cursor
        for name in ("execute", "executemany"):
            original = getattr(cls, name)
            self._patched.append((cls, name, original))
            setattr(cls, name, self._wrap(original, name == "executemany"))

    def _wrap(self, original: Any, many: bool) -> Any:
        counter = self

        def call(obj: Any, query: Any, params: Any = None, *args: Any, **kw: Any) -> Any:
            if many:
                params = list(params or ())
                counter.n += len(params)
            else:
                counter.n += 1
            return original(obj, query, params, *args, **kw)

        return call

    def close(self) -> None:
        for cls, name, original in self._patched:
            setattr(cls, name, original)


def db_stats(conn: Any) -> dict[str, int]:
    got = conn.execute(
        "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_fetched, "
        "blks_read + blks_hit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    names = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted", "tup_fetched", "blocks")
    return dict(zip(names, (int(x) for x in got), strict=True))


def load(url: str, pages: int, batch: int, group: int) -> None:
    """Per 1,000 pages of one worker: claims of ``batch``, commits in groups of
    ``group`` outcomes, one heartbeat per claim (the crawl beats every lease/3 s, so
    this is more than a crawl at 1,000 pages per 10 s pays). Statements counted here,
    transactions and tuples from pg_stat_database (other databases' work not included;
    other sessions on this one would be)."""
    store = PostgresStore.open(url)
    # rows to claim: found rows, as a crawl's list pages add them (not counted below)
    tag = f"{os.getpid()}-{time.time_ns()}"
    for lo in range(0, pages, 1000):
        store.seed(
            [
                NewRow("detail", f"http://127.0.0.1:8000/load/{tag}/{i}")
                for i in range(lo, min(pages, lo + 1000))
            ]
        )
    leases = PgLeases(store, 30.0)
    leases.register()
    probe = PostgresStore.open(url)
    pconn = probe._conn()
    pconn.execute("SELECT pg_stat_clear_snapshot()")
    counted = Counted()
    before = db_stats(pconn)
    n0 = counted.n
    ms = {"claim": 0.0, "commit": 0.0, "heartbeat": 0.0}
    stmts = {"claim": 0, "commit": 0, "heartbeat": 0}
    done = 0
    claims = beats = 0
    while done < pages:
        s0, t0 = counted.n, time.perf_counter()
        rows = leases.claim(batch, MAX_ATTEMPTS)
        ms["claim"] += 1000 * (time.perf_counter() - t0)
        stmts["claim"] += counted.n - s0
        claims += 1
        if not rows:
            break
        for i in range(0, len(rows), group):
            part = rows[i : i + group]
            s0, t0 = counted.n, time.perf_counter()
            store.commit_many([page_outcome(r, leases.token(r.id)) for r in part])
            ms["commit"] += 1000 * (time.perf_counter() - t0)
            stmts["commit"] += counted.n - s0
            for r in part:
                leases.done(r.id)
        s0, t0 = counted.n, time.perf_counter()
        leases.heartbeat()
        ms["heartbeat"] += 1000 * (time.perf_counter() - t0)
        stmts["heartbeat"] += counted.n - s0
        beats += 1
        done += len(rows)
    total_stmts = counted.n - n0
    counted.close()
    time.sleep(0.6)  # the statistics collector flushes every 500 ms
    pconn.execute("SELECT pg_stat_clear_snapshot()")
    after = db_stats(pconn)
    leases.stop()
    per = 1000 / done
    say(f"{done} pages, {claims} claims of {batch}, commit groups of {group}, {beats} heartbeats")
    for what in ms:
        say(
            f"  {what:9s} per 1,000 pages: {stmts[what] * per:7.0f} statements {ms[what] * per:8.0f} ms"
        )
    say(f"  all       per 1,000 pages: {total_stmts * per:7.0f} statements")
    for k in after:
        say(f"  pg_stat_database {k:13s} per 1,000 pages: {(after[k] - before[k]) * per:9.0f}")
    store.close()
    probe.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("url")
    b.add_argument("--rows", type=int, default=10_000_000)
    m = sub.add_parser("measure")
    m.add_argument("url")
    m.add_argument("--rounds", type=int, default=5)
    m.add_argument("--batch", type=int, default=100)
    m.add_argument("--claims", type=int, default=40, help="claims per round and claimer set")
    m.add_argument("--skip", default="", help="comma-separated reads to leave out")
    ld = sub.add_parser("load")
    ld.add_argument("url")
    ld.add_argument("--pages", type=int, default=5000)
    ld.add_argument("--batch", type=int, default=32)
    ld.add_argument("--group", type=int, default=16)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        build(args.url, args.rows)
    elif args.cmd == "measure":
        skip = {s for s in args.skip.split(",") if s}
        measure(args.url, args.rounds, args.batch, args.claims, skip)
    else:
        load(args.url, args.pages, args.batch, args.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
