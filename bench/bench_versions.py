"""Two revisions of the framework side by side: the CPU a change saves, in one run.

The other benches compare the framework against the plain alternative; this one
compares the framework against itself before a change, which machine drift otherwise
hides (on a shared host the same crawl varies by 10-50% between minutes). Each
revision's ``framework/`` is taken with ``git archive`` into a folder of its own and put
first on ``PYTHONPATH``; rounds alternate the order (A B, B A, ...), and the figure that
carries is the median of the per-round ratios B / A.

* ``crawl``: ``framework crawl`` of bench/specs/bench.yaml into a fresh workspace, the
  demo site started once (``--cases``), the bench's common settings. With
  ``--database URL`` the workspace is a fresh PostgreSQL schema of that database each
  round (one crawl process: one PostgreSQL worker), dropped after it.
* ``reparse``: ``framework reparse`` of a copy of a workspace crawled once with the
  job's ``court`` selector broken, with the fixed job: every detail item changes, as in
  bench_reparse.py. Each revision reparses a workspace it crawled itself: a kind's
  digest covers the framework's source (framework/crawl/fingerprint.py), so one
  revision's crawl would have the other's reparse read every kind. ``--processes`` is
  passed on (default ``auto``); each round says how many pages were read.
* ``status``: ``framework status --json`` of one workspace (crawled once by B), whose
  events log is given a long history first: ``--history`` lines as reparses write them
  (one ``items_changed`` per page each changed, between ``reparse_started`` and
  ``reparse_finished``), after the crawl's own lines.

    .venv/bin/python bench/bench_versions.py 1485726 f9c0f88 --what crawl --rounds 8
    .venv/bin/python bench/bench_versions.py 1485726 f9c0f88 --what reparse --rounds 8 --processes 1
    .venv/bin/python bench/bench_versions.py bbf147e HEAD --database postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/bench_versions.py 292a01e eb9ccbe --what status --history 900000

Reported per revision: median wall and CPU seconds (user+system of the child), then the
per-round ratios. Loopback only; the site and every child are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_pg_crawl import drop_schemas, make_schema, schema_url  # noqa: E402
from bench_reparse import BROKEN, FIXED, last_event  # noqa: E402
from bench_spider import PY, SAME, SPEC, Site, setting_args  # noqa: E402

CLI = [PY, "-c", "from framework.cli import entry; entry()"]  # what `framework` runs


def checkout(rev: str, into: Path) -> Path:
    """``framework/`` of ``rev`` under ``into`` (what goes on PYTHONPATH)."""
    data = subprocess.run(
        ["git", "archive", rev, "framework"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run(argv: list[str], cwd: Path, tree: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one child run with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree), "FRAMEWORK_HOME": str(cwd)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv[3:6])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
        )
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def long_history(ws: Path, lines: int) -> None:
    """Append ``lines`` event lines to ``ws``'s log as reparses write them: per reparse
    one ``items_changed`` line per item (those of the workspace's ``items``), between
    its ``reparse_started`` and ``reparse_finished``."""
    with sqlite3.connect(ws / "state.sqlite") as conn:
        items = conn.execute(
            "SELECT i.dedupe_key, r.url, r.id FROM items i JOIN rows r ON r.id = i.row_id"
        ).fetchall()
    if not items:
        raise SystemExit(f"{ws}: the crawl stored no item")
    written = 0
    with open(ws / "events.jsonl", "a", encoding="utf-8") as fh:
        while written < lines:
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime())
            batch = items[: max(1, lines - written - 2)]
            fh.write(json.dumps({"time": now, "event": "reparse_started", "job": "bench"}) + "\n")
            for key, url, row in batch:
                line = {"time": now, "event": "items_changed", "job": "bench", "url": url}
                fh.write(json.dumps({**line, "row": row, "keys": [key]}) + "\n")
            done = {"time": now, "event": "reparse_finished", "job": "bench", "counts": {}}
            fh.write(json.dumps(done) + "\n")
            written += len(batch) + 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the revision before (git rev)")
    parser.add_argument("b", help="the revision after (git rev)")
    parser.add_argument("--what", choices=("crawl", "reparse", "status"), default="crawl")
    parser.add_argument(
        "--history", type=int, default=900_000, help="status: event lines of past reparses"
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--processes", default="auto", help="reparse: --processes")
    parser.add_argument(
        "--database", default=None, help="crawl: into a PostgreSQL schema of this database"
    )
    args = parser.parse_args()
    command = ".venv/bin/python bench/bench_versions.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    work = Path(tempfile.mkdtemp(prefix="bench-versions-"))
    trees = {"A": checkout(args.a, work / "A"), "B": checkout(args.b, work / "B")}
    site = Site(args.cases)
    schemas: list[str] = []  # the PostgreSQL workspace of the round running (--database)
    try:
        project = work / "project"
        job = project / "projects" / "bench" / "job.yaml"
        job.parent.mkdir(parents=True)
        text = SPEC.read_text().replace("{base}", site.url)
        job.write_text(text)
        settings = setting_args({k: v for k, v in SAME.items() if k != "LOG_LEVEL"})
        if args.what == "reparse":
            broken_job = project / "broken.yaml"
            broken_job.write_text(text.replace(FIXED, BROKEN))
            for v, tree in trees.items():
                argv = [*CLI, "crawl", str(broken_job), "--workspace", str(work / f"broken-{v}")]
                run([*argv, "-q", *settings], project, tree)
        if args.what == "status":
            ws = work / "ws-status"
            run(
                [*CLI, "crawl", "bench", "--workspace", str(ws), "-q", *settings],
                project,
                trees["B"],
            )
            long_history(ws, args.history)
        runs: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
        for n in range(args.rounds):
            for v in ("A", "B") if n % 2 == 0 else ("B", "A"):
                ws = work / ("ws-status" if args.what == "status" else f"ws-{v}")
                if args.what == "status":
                    argv = [*CLI, "status", "bench", "--workspace", str(ws), "--json"]
                elif args.what == "crawl":
                    shutil.rmtree(ws, ignore_errors=True)
                    where = str(ws)
                    if args.database:  # a schema of its own: nothing of the last round
                        schemas.append(make_schema(args.database, v.lower()))
                        where = schema_url(args.database, schemas[-1])
                    argv = [*CLI, "crawl", "bench", "--workspace", where, "-q", *settings]
                else:
                    shutil.rmtree(ws, ignore_errors=True)
                    shutil.copytree(work / f"broken-{v}", ws)
                    argv = [*CLI, "reparse", "bench", "--workspace", str(ws), "-q"]
                    argv += ["--processes", args.processes]
                site.reset()
                wall, cpu = run(argv, project, trees[v])
                if schemas:
                    drop_schemas(args.database, schemas)
                    schemas.clear()
                runs[v].append((wall, cpu))
                served = site.served()
                read = ""
                if args.what == "reparse":
                    counts = last_event(ws, "reparse_finished")["counts"]
                    changed = counts["items_changed"]
                    if served or not changed:  # it must fix items, and fetch nothing
                        raise SystemExit(f"reparse by {v}: {served} requests, {changed} changed")
                    read = f" pages={counts['pages']}"
                print(
                    f"round {n + 1} {v} wall={wall:6.2f}s cpu={cpu:6.2f}s {served=}{read}",
                    flush=True,
                )
    finally:
        site.stop()
        shutil.rmtree(work, ignore_errors=True)
        if schemas:
            drop_schemas(args.database, schemas)
    print(f"\ncommand: {command}")
    print(
        f"A = {args.a}, B = {args.b}; {args.what}; load average {os.getloadavg()[0]:.1f} at the end"
    )
    for v in ("A", "B"):
        walls, cpus = zip(*runs[v], strict=True)
        print(
            f"{v}: median wall {statistics.median(walls):.3f} s, CPU {statistics.median(cpus):.3f} s"
        )
    pairs = list(zip(runs["A"], runs["B"], strict=True))
    wall_ratio = statistics.median(b[0] / a[0] for a, b in pairs)
    cpu_ratio = statistics.median(b[1] / a[1] for a, b in pairs)
    print(f"B / A, median of the per-round ratios: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
