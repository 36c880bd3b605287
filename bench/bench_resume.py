"""Workspace storage benchmarks: resume start-up, commit cost, streaming memory.

    .venv/bin/python bench/bench_resume.py            # full sizes (about 2 minutes)
    .venv/bin/python bench/bench_resume.py --quick    # smaller sizes, for a smoke run

1. Resume start-up: open the workspace and stream ``resumable()`` with (ok, pending)
   = (100k, 1k), (100k, 10k), (1M, 1k). It must stay under 2 s and grow with the pending
   rows, not the total. The plain alternative in the same run is the same query
   without the index (``NOT INDEXED``, a full table scan).
2. ``commit()`` per page (1 row outcome + 10 new rows + 10 items, ~300 B each) against a
   plain JSONL append of the same data (``JsonlLog.append`` and a bare ``f.write``).
3. Peak memory of ``iter_items()`` over 1M items (tracemalloc peak and RSS growth),
   against ``fetchall()`` of the same table (on 100k items, and extrapolated).

Rows and items for (1) and (3) are bulk-inserted with plain SQL into the real schema
(building 1M rows through commit() would only measure the builder); every measured
path uses the public API. Timings are wall clock on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.workspace import (
    ItemWrite,
    JsonlLog,
    NewRow,
    Outcome,
    SqliteStore,
    Workspace,
    canonical_json,
    content_hash,
)

NOW = "2026-01-01T00:00:00.000+00:00"


def bulk_rows(path: Path, ok: int, pending: int) -> None:
    """ok rows first, then pending ones interleaved at the end (as a half-done crawl)."""
    SqliteStore.open(path).close()  # the real schema
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")

    def gen():  # type: ignore[no-untyped-def]
        for i in range(ok + pending):
            status = "ok" if i < ok else "pending"
            url = f"http://127.0.0.1:8800/case/{i}"
            fp = NewRow("detail", url).fingerprint
            yield (fp, "detail", url, "GET", "{}", status, 1 if status == "ok" else 0, NOW, NOW)

    with conn:
        conn.executemany(
            "INSERT INTO rows (fingerprint, kind, url, method, context, status, attempts, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            gen(),
        )
    conn.close()


def bulk_items(path: Path, n: int) -> None:
    SqliteStore.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")

    def gen():  # type: ignore[no-untyped-def]
        for i in range(n):
            data = {
                "title": f"Case {i} v. State",
                "filed": "2026-01-01",
                "amount": i,
                "pad": "x" * 120,
            }
            yield (f"c:{i:08d}", "c", str(i), canonical_json(data), content_hash(data), NOW, NOW, 1)

    with conn:
        conn.executemany(
            "INSERT INTO items (dedupe_key, source_type, source_id, data, content_hash, "
            "first_scraped, last_scraped, complete) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            gen(),
        )
    conn.close()


def bench_resume(tmp: Path, sizes: list[tuple[int, int]], repeat: int) -> list[dict[str, object]]:
    out = []
    for ok, pending in sizes:
        folder = tmp / f"resume_{ok}_{pending}"
        folder.mkdir()
        bulk_rows(folder / "state.sqlite", ok, pending)
        times: list[float] = []
        indexed: list[float] = []
        scans: list[float] = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            with Workspace.open(folder) as ws:
                got = sum(1 for _ in ws.store.resumable(3))
            times.append(time.perf_counter() - t0)
            assert got == pending, (got, pending)
            conn = sqlite3.connect(folder / "state.sqlite")
            where = (
                "WHERE status != 'ok' AND (status = 'pending' OR (retryable = 1 AND attempts < 3)) "
                "ORDER BY id"
            )
            for hint, sink in (("INDEXED BY rows_open", indexed), ("NOT INDEXED", scans)):
                t0 = time.perf_counter()
                n = len(conn.execute(f"SELECT * FROM rows {hint} {where}").fetchall())
                sink.append(time.perf_counter() - t0)
                assert n == pending
            conn.close()
        out.append(
            {
                "ok": ok,
                "pending": pending,
                "open+resumable_s": round(statistics.median(times), 4),
                "sql_indexed_s": round(statistics.median(indexed), 4),
                "sql_full_scan_s": round(statistics.median(scans), 4),
            }
        )
        print(json.dumps(out[-1]), flush=True)
    return out


def page(i: int) -> tuple[list[NewRow], list[ItemWrite]]:
    rows = [NewRow("detail", f"http://127.0.0.1:8800/case/{i}/{j}") for j in range(10)]
    items = [
        ItemWrite(
            f"c:{i}:{j}",
            "c",
            f"{i}:{j}",
            {
                "title": f"Case {i}/{j} v. State",
                "filed": "2026-01-01",
                "amount": j,
                "pad": "x" * 200,
            },
        )
        for j in range(10)
    ]
    return rows, items


def bench_commit(tmp: Path, pages: int) -> dict[str, object]:
    store = SqliteStore.open(tmp / "commit.sqlite")
    (root,) = store.seed([NewRow("list", "http://127.0.0.1:8800/list")])
    queue = [root.id]
    prepared = [page(i) for i in range(pages)]
    c0 = time.process_time()  # CPU of the process, background checkpoints included
    t0 = time.perf_counter()
    for rows, items in prepared:
        result = store.commit(
            Outcome(queue.pop(), ok=True, http_status=200, new_rows=rows, items=items)
        )
        queue.extend(r.id for r in result.inserted)
    commit_s = time.perf_counter() - t0
    commit_cpu = time.process_time() - c0
    wal = tmp / "commit.sqlite-wal"
    wal_mb = round(wal.stat().st_size / 2**20, 1) if wal.exists() else 0.0
    store.close()

    log = JsonlLog(tmp / "feed.jsonl", redact=False)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for rows, items in prepared:
        for it in items:
            log.append({"dedupe_key": it.dedupe_key, "data": dict(it.data)})
        for r in rows:
            log.append({"kind": r.kind, "url": r.url})
    jsonl_s = time.perf_counter() - t0
    jsonl_cpu = time.process_time() - c0
    log.close()

    t0 = time.perf_counter()
    with open(tmp / "plain.jsonl", "w", encoding="utf-8") as f:
        for rows, items in prepared:
            for it in items:
                f.write(json.dumps({"dedupe_key": it.dedupe_key, "data": dict(it.data)}) + "\n")
            for r in rows:
                f.write(json.dumps({"kind": r.kind, "url": r.url}) + "\n")
            f.flush()
    plain_s = time.perf_counter() - t0
    result = {
        "pages": pages,
        "commit_ms_per_page": round(commit_s / pages * 1000, 3),
        "commit_cpu_ms_per_page": round(commit_cpu / pages * 1000, 3),
        "commit_rows+items_per_s": round(pages * 20 / commit_s),
        "wal_mb_at_end": wal_mb,
        "jsonllog_ms_per_page": round(jsonl_s / pages * 1000, 3),
        "jsonllog_cpu_ms_per_page": round(jsonl_cpu / pages * 1000, 3),
        "plain_write_ms_per_page": round(plain_s / pages * 1000, 3),
    }
    print(json.dumps(result), flush=True)
    return result


def bench_memory(tmp: Path, n: int, plain_n: int) -> dict[str, object]:
    folder = tmp / "items"
    folder.mkdir()
    bulk_items(folder / "state.sqlite", n)
    proc = psutil.Process()
    gc.collect()
    with Workspace.open(folder, readonly=True) as ws:
        rss0 = proc.memory_info().rss
        t0 = time.perf_counter()
        count = sum(1 for _ in ws.store.iter_items())
        stream_s = time.perf_counter() - t0
        rss_stream = proc.memory_info().rss - rss0
        part = min(200_000, n // 2)
        tracemalloc.start()
        count2 = sum(1 for _ in ws.store.iter_items(after=f"c:{n - part:08d}"))
        _, peak_stream = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert count == n
    assert count2 == part - 1
    conn = sqlite3.connect(folder / "state.sqlite")
    tracemalloc.start()
    rows = conn.execute(f"SELECT * FROM items ORDER BY dedupe_key LIMIT {plain_n}").fetchall()
    _, peak_plain = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del rows
    conn.close()
    result = {
        "items": n,
        "iter_items_s": round(stream_s, 2),
        "iter_items_rss_growth_mb": round(rss_stream / 2**20, 1),
        f"iter_items_tracemalloc_peak_mb({part} items)": round(peak_stream / 2**20, 2),
        f"fetchall_tracemalloc_peak_mb({plain_n} items)": round(peak_plain / 2**20, 1),
        "fetchall_extrapolated_mb(all items)": round(peak_plain / 2**20 * n / plain_n),
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    big = 100_000 if args.quick else 1_000_000
    sizes = list(dict.fromkeys([(100_000, 1_000), (100_000, 10_000), (big, 1_000)]))
    print(
        f"# {' '.join(sys.argv)}  (python {sys.version.split()[0]}, sqlite "
        f"{sqlite3.sqlite_version}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})"
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_resume(tmp, sizes, repeat=3)
        bench_commit(tmp, 500 if args.quick else 3000)
        bench_memory(tmp, big, 100_000 if not args.quick else 20_000)


if __name__ == "__main__":
    main()
