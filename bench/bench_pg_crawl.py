"""Crawls on a PostgreSQL workspace: one worker vs the SQLite crawl, and 1, 2, 4 workers.

Two measurements of issue 14, each on the demo site (``python -m framework.demo.site
--cases N --no-edge-cases [--delay S]``) started once, every crawl in its own
subprocess, variants alternating round by round so that drift on a shared machine hits
them alike. Pages are counted by the site (``/_stats``).

``cpu``: pages per crawler CPU-second of ``framework crawl bench/specs/bench.yaml``
into a fresh SQLite folder (``sqlite``) vs into a fresh PostgreSQL schema (``pg``), no
added latency. Crawler CPU is user+system of the crawl process and its children
(``RUSAGE_CHILDREN``); the PostgreSQL server's CPU for the run is reported beside it
(the backends whose process title names the bench's database, sampled every 0.2 s, so
a backend's last fraction of a sample may be missed), and the database's work per
1,000 pages from ``pg_stat_database`` (transactions, tuples, blocks). The items of
both are compared field by field in the first round.

``scale``: aggregate pages per second of 1, 2 and 4 ``framework crawl`` processes
started together on one fresh PostgreSQL schema, against the site with ``--delay``
seconds added to every answer (0.05 by default: the crawl waits on the site, not on
its CPU). The job is bench.yaml with every list page a start URL and no ``next`` (the
demo's list pages form a chain, page k+1 found on page k, which would bound every
worker count by the chain's own latency).

    .venv/bin/python bench/bench_pg_crawl.py cpu postgresql://postgres@127.0.0.1/b27c --cases 3000 --rounds 3
    .venv/bin/python bench/bench_pg_crawl.py scale postgresql://postgres@127.0.0.1/b27c --cases 2000 --rounds 2

The database must exist; each run makes its own schema in it (dropped at the end
unless ``--keep``). Loopback only; the site and every crawl are stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import PY, ROOT, Site, TimedRun

from framework.demo.data import PER_PAGE
from framework.workspace import Workspace

FRAMEWORK = [PY, "-c", "import sys; from framework.cli import main; sys.exit(main())"]
SPEC = ROOT / "bench" / "specs" / "bench.yaml"


class PgCpu:
    """CPU seconds of the server backends serving ``database`` while it runs (sampled)."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        for p in psutil.process_iter(["name"]):
            try:
                if p.info["name"] != "postgres":
                    continue
                title = " ".join(p.cmdline())
                if f" {self.database} " not in f" {title} ":
                    continue
                t = p.cpu_times()
                self.seen[p.pid] = float(t.user + t.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.2)

    def __enter__(self) -> PgCpu:
        self._sample()
        self.base = dict(self.seen)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(v - self.base.get(pid, 0.0) for pid, v in self.seen.items())


@dataclass
class Run(TimedRun):
    exits: list[int]
    workspace: str
    load: tuple[float, float]
    pg_cpu: float = 0.0
    db: dict[str, int] = field(default_factory=dict)
    span: float = 0.0  # seconds from the first to the last URL-log line (PostgreSQL)


def schema_url(base: str, schema: str) -> str:
    return f"{base}?options={quote(f'-csearch_path={schema}')}"


def db_stats(base: str) -> dict[str, int]:
    import psycopg

    names = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted", "tup_fetched")
    with psycopg.connect(base, autocommit=True) as conn:
        time.sleep(0.6)  # the statistics collector reports every 500 ms
        got = conn.execute(
            f"SELECT {', '.join(names)}, blks_read + blks_hit FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert got is not None
    return dict(zip((*names, "blocks"), (int(x) for x in got), strict=True))


def make_schema(base: str, variant: str) -> str:
    import psycopg

    schema = f"b_{variant}_{secrets.token_hex(4)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


def drop_schemas(base: str, schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def job_file(work: Path, site: Site, cases: int, chained: bool) -> Path:
    """bench.yaml for this site; unchained: every list page a start URL, no ``next``."""
    name = "chained" if chained else "flat"
    job = work / "project" / "projects" / name / "job.yaml"
    if job.exists():
        return job
    job.parent.mkdir(parents=True, exist_ok=True)
    text = SPEC.read_text().replace("{base}", site.url)
    if not chained:
        pages = -(-cases // PER_PAGE)
        starts = ", ".join(f'"{site.url}/cases?page={n}"' for n in range(1, pages + 1))
        text = text.replace(f'start_urls: ["{site.url}/cases"]', f"start_urls: [{starts}]")
        text = text.replace('  next: "a.next::attr(href)"\n', "")
        assert "next:" not in text
        assert "page=1" in text
    job.write_text(text.replace("name: bench", f"name: {name}"))
    return job


def crawl(
    variant: str, argvs: list[list[str]], site: Site, work: Path, n: int, where: str, base: str
) -> Run:
    """Start every argv at once, wait for all; CPU of all of them and their children."""
    site.reset()
    load0 = os.getloadavg()[0]
    db0 = db_stats(base) if base else {}
    child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    database = urlsplit(base).path.lstrip("/") if base else ""
    pg = PgCpu(database) if base else None
    if pg is not None:
        pg.__enter__()
    started = time.monotonic()
    procs = []
    logs = []
    for i, argv in enumerate(argvs):
        log = (work / f"{variant}-{n}-{i}.log").open("w")
        logs.append(log)
        procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log))
    exits = [p.wait() for p in procs]
    wall = time.monotonic() - started
    if pg is not None:
        pg.__exit__()
    for log in logs:
        log.close()
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (child1.ru_utime - child0.ru_utime) + (child1.ru_stime - child0.ru_stime)
    db1 = db_stats(base) if base else {}
    return Run(
        variant,
        wall,
        site.served(),
        cpu,
        exits,
        where,
        (load0, os.getloadavg()[0]),
        pg.seconds if pg is not None else 0.0,
        {k: db1[k] - db0[k] for k in db1},
        fetch_span(where) if base else 0.0,
    )


def fetch_span(where: str) -> float:
    """Seconds between the first and the last line of the URL log (the workers' start-up
    and shutdown left out)."""
    import psycopg

    with psycopg.connect(where, autocommit=True) as conn:
        got = conn.execute("SELECT min(time), max(time) FROM log_lines WHERE log = 'urls'")
        first, last = got.fetchone() or (None, None)
    if not first or not last:
        return 0.0
    return (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()


def items(where: str) -> dict[str, dict[str, Any]]:
    with Workspace.open(where, create=False, readonly=True) as ws:
        return {i.dedupe_key: dict(i.data) for i in ws.store.iter_items(complete_only=False)}


def show(run: Run, n: int) -> None:
    extra = f" pg_cpu={run.pg_cpu:.2f}s fetching={run.span:.1f}s" if run.db else ""
    print(
        f"round {n + 1} {run.variant:<7} {run.wall:7.2f}s {run.pages:6d} pages "
        f"{run.pages / run.wall:7.1f} pages/s cpu={run.cpu:6.2f}s "
        f"({run.pages_per_cpu_s:6.1f} pages/cpu-s){extra} exits={run.exits} "
        f"load {run.load[0]:.1f}->{run.load[1]:.1f}",
        flush=True,
    )


def cpu_bench(args: argparse.Namespace, work: Path, schemas: list[str]) -> None:
    site = Site(args.cases, 0.0)
    runs: dict[str, list[Run]] = {"sqlite": [], "pg": []}
    try:
        job = job_file(work, site, args.cases, chained=True)
        for n in range(args.rounds):
            for variant in runs:
                if variant == "sqlite":
                    where = tempfile.mkdtemp(prefix=f"ws-{n}-", dir=work)
                    base = ""
                else:
                    schemas.append(make_schema(args.pg, "pg"))
                    where, base = schema_url(args.pg, schemas[-1]), args.pg
                argv = [*FRAMEWORK, "crawl", str(job), "--workspace", where, "-q", *args.extra]
                run = crawl(variant, [argv], site, work, n, where, base)
                runs[variant].append(run)
                show(run, n)
    finally:
        site.stop()
    print()
    print(
        "| variant | median wall s | median crawler CPU s | pages per CPU-s | pages | failed runs |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, rs in runs.items():
        print(
            f"| {name} | {statistics.median(r.wall for r in rs):.2f} | "
            f"{statistics.median(r.cpu for r in rs):.2f} | "
            f"{statistics.median(r.pages_per_cpu_s for r in rs):.1f} | "
            f"{statistics.median(r.pages for r in rs):.0f} | "
            f"{sum(1 for r in rs if any(r.exits))} |"
        )
    ratios = [
        p.pages_per_cpu_s / s.pages_per_cpu_s
        for p, s in zip(runs["pg"], runs["sqlite"], strict=True)
    ]
    print()
    print(
        "pages per crawler CPU-second, pg / sqlite, per round: "
        + ", ".join(f"{r:.3f}x" for r in ratios)
        + f" (median {statistics.median(ratios):.3f}x; target >= 0.8x)"
    )
    pg_cpu = [r.pg_cpu for r in runs["pg"]]
    print(f"PostgreSQL server CPU per pg run: {', '.join(f'{c:.2f}s' for c in pg_cpu)}")
    with_server = [
        p.pages / (p.cpu + p.pg_cpu) / s.pages_per_cpu_s
        for p, s in zip(runs["pg"], runs["sqlite"], strict=True)
    ]
    print(
        "pages per CPU-second counting the server too, pg / sqlite: "
        + ", ".join(f"{r:.3f}x" for r in with_server)
    )
    for r in runs["pg"]:
        per = 1000 / r.pages
        print(
            "database work per 1,000 pages: "
            + ", ".join(f"{k} {v * per:.0f}" for k, v in r.db.items())
        )
    a, b = items(runs["sqlite"][0].workspace), items(runs["pg"][0].workspace)
    print(f"items sqlite vs pg (round 1): {len(a)} vs {len(b)}, identical: {a == b}")


def scale_bench(args: argparse.Namespace, work: Path, schemas: list[str]) -> None:
    site = Site(args.cases, args.delay)
    counts = [int(x) for x in args.workers.split(",")]
    runs: dict[int, list[Run]] = {k: [] for k in counts}
    try:
        job = job_file(work, site, args.cases, chained=False)
        for n in range(args.rounds):
            for k in counts:
                schemas.append(make_schema(args.pg, f"w{k}"))
                where = schema_url(args.pg, schemas[-1])
                argv = [*FRAMEWORK, "crawl", str(job), "--workspace", where, "-q", *args.extra]
                run = crawl(f"{k}w", [argv] * k, site, work, n, where, args.pg)
                runs[k].append(run)
                show(run, n)
    finally:
        site.stop()
    print()
    print(
        "| workers | median wall s | pages/s (wall) | x one | fetching s | pages/s (fetching) "
        "| x one | crawler CPU s | pages | failed runs |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    one = statistics.median(r.pages / r.wall for r in runs[counts[0]])
    one_f = statistics.median(r.pages / r.span for r in runs[counts[0]] if r.span)
    for k, rs in runs.items():
        rate = statistics.median(r.pages / r.wall for r in rs)
        rate_f = statistics.median(r.pages / r.span for r in rs if r.span)
        print(
            f"| {k} | {statistics.median(r.wall for r in rs):.2f} | {rate:.1f} | "
            f"{rate / one:.2f}x | {statistics.median(r.span for r in rs):.2f} | {rate_f:.1f} | "
            f"{rate_f / one_f:.2f}x | {statistics.median(r.cpu for r in rs):.2f} | "
            f"{statistics.median(r.pages for r in rs):.0f} | "
            f"{sum(1 for r in rs if any(r.exits))} |"
        )
    for k, rs in runs.items():
        paired = [
            r.pages / r.wall / (o.pages / o.wall) for r, o in zip(rs, runs[counts[0]], strict=True)
        ]
        print(
            f"{k} workers / {counts[0]} (wall), per round: "
            + ", ".join(f"{x:.2f}x" for x in paired)
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("cpu", "scale"))
    parser.add_argument("pg", help="postgresql://... of an existing scratch database")
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.05, help="scale: seconds per answer")
    parser.add_argument("--workers", default="1,2,4", help="scale: worker counts")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and schemas")
    parser.add_argument("extra", nargs="*", help="more crawl arguments for every crawl (after --)")
    args = parser.parse_args()
    print(
        "command: .venv/bin/python bench/bench_pg_crawl.py "
        + " ".join(shlex.quote(a) for a in sys.argv[1:])
    )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    work = Path(tempfile.mkdtemp(prefix="bench-pg-crawl-"))
    schemas: list[str] = []
    try:
        if args.what == "cpu":
            cpu_bench(args, work, schemas)
        else:
            scale_bench(args, work, schemas)
    finally:
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        if not args.keep:
            drop_schemas(args.pg, schemas)
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}, schemas {schemas}")


if __name__ == "__main__":
    main()
