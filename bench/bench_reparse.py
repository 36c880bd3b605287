"""`framework reparse` vs a fresh crawl of the same pages, and what storing responses costs.

Starts the demo site (``python -m framework.demo.site --cases N --no-edge-cases``) once,
then, round by round (alternating, so drift on a shared machine hits every variant
alike), with the job bench/specs/bench.yaml:

* ``crawl-broken``   ``framework crawl`` into a fresh workspace with responses stored, with
  the job's ``court`` selector broken (it matches nothing: every record lacks the
  field): the pages a selector fix has to reach
* ``crawl-store``    ``framework crawl`` of the fixed job into a fresh workspace,
  responses stored (the default): the fresh crawl a reparse saves
* ``crawl-nostore``  the same with ``-s FRAMEWORK_STORE_RESPONSES=False``
* ``reparse``        ``framework reparse`` with the fixed job, of a copy of the workspace
  ``crawl-broken`` filled: the same pages, no request (the site's counter must stay at
  0), with its default ``--processes auto`` (the parse in one worker per idle core,
  one writer). It reads the detail pages again; the list pages' kind did not change
  (framework/crawl/fingerprint.py), so they are left as they are
* ``reparse-1``      the same on another copy, with ``--processes 1`` (one process)
* ``reparse-all``    the same with ``--all``: every stored page read again, list pages too
* ``reparse-noop``   ``framework reparse`` again, with the same fixed job, of a copy of the
  workspace ``reparse`` left: every kind is as it was read, nothing is read. What a
  reparse costs whatever its pages (the interpreter, the imports, the checks): reported
  beside the speed-up, with the speed-up of the pages alone (the reparse's time minus
  this one's). The target is the whole command's; this says where its time goes

Every reparse must change every detail item (each gains its ``court``) and nothing
else, and leave the items equal, field by field, to those of ``crawl-store``.

Rounds alternate the order of the two storing crawls, and of the three reparses, so
that a host speeding up or slowing down within a round (it does, by 20% in minutes)
does not favour one of each pair. ``--storing-only`` runs the two storing crawls alone,
for more rounds of that one ratio.

Reported: median wall and CPU seconds (user+system of the child and its workers:
more robust to a loaded machine than wall time), the machine's load average around each
run, the reparse speed-ups over the crawl that stored the pages, the crawl's CPU with
storing over without, and the disk the stored responses take per 1,000 pages
(compressed bodies, and the state file with and without them).

    .venv/bin/python bench/bench_reparse.py [--cases 9091] [--rounds 3] [--storing-only]

Loopback only; the site and every child are stopped at the end.
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
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import Site, finish, print_setup, setting_args  # noqa: E402
from bench_spider import SAME, SPEC  # noqa: E402

CLI = [sys.executable, "-c", "from framework.cli import entry; entry()"]  # what `framework` runs
VARIANTS = (
    "crawl-broken",
    "crawl-store",
    "crawl-nostore",
    "reparse",
    "reparse-1",
    "reparse-all",
    "reparse-noop",
)
STORING = ("crawl-store", "crawl-nostore")
REPARSES = ("reparse", "reparse-1", "reparse-all")
# the fix the reparse applies: a selector that matched nothing, corrected
FIXED = 'court: ".court::text"'
BROKEN = 'court: ".court-name::text"'


@dataclass
class Run:
    variant: str
    wall: float
    cpu: float
    served: int  # requests the site answered during the run
    exit_code: int
    workspace: Path
    load: float  # the 1-minute load average at the end of the run


def run_once(variant: str, site: Site, work: Path, n: int, broken: Path | None) -> Run:
    project = work / "project"
    job = project / "projects" / "bench" / "job.yaml"
    broken_job = project / "broken.yaml"  # the same job (name, keys), one selector wrong
    if not job.exists():
        job.parent.mkdir(parents=True)
        text = SPEC.read_text().replace("{base}", site.url)
        if FIXED not in text:
            raise SystemExit(f"{SPEC} no longer has {FIXED!r}: update the bench's fix")
        job.write_text(text)
        broken_job.write_text(text.replace(FIXED, BROKEN))
    env = {**os.environ, "FRAMEWORK_HOME": str(project)}
    if variant.startswith("reparse"):
        assert broken is not None
        workspace = work / f"{variant}-{n}"
        shutil.copytree(broken, workspace)  # each reparse fixes pages of its own
        argv = [*CLI, "reparse", "bench", "--workspace", str(workspace), "-q"]
        if variant == "reparse-1":
            argv += ["--processes", "1"]
        if variant == "reparse-all":
            argv += ["--all"]
    else:
        workspace = work / f"{variant}-{n}"
        spec = str(broken_job) if variant == "crawl-broken" else "bench"
        argv = [*CLI, "crawl", spec, "--workspace", str(workspace), "-q"]
        argv += setting_args({k: v for k, v in SAME.items() if k != "LOG_LEVEL"})
        if variant == "crawl-nostore":
            argv += ["-s", "FRAMEWORK_STORE_RESPONSES=False"]
    site.reset()
    child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with (work / f"{variant}-{n}.log").open("w") as log:
        proc = subprocess.run(argv, cwd=project, env=env, stdout=log, stderr=log, check=False)
    wall = time.monotonic() - started
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (child1.ru_utime - child0.ru_utime) + (child1.ru_stime - child0.ru_stime)
    load = os.getloadavg()[0]
    return Run(variant, wall, cpu, site.served(), proc.returncode, workspace, load)


def items(workspace: Path) -> dict[str, dict]:
    """Every stored item's data, by dedupe key."""
    with sqlite3.connect(workspace / "state.sqlite") as conn:
        return {k: json.loads(d) for k, d in conn.execute("SELECT dedupe_key, data FROM items")}


def last_event(workspace: Path, name: str) -> dict:
    found: dict = {}
    with open(workspace / "events.jsonl", encoding="utf-8") as fh:
        for line in fh:
            event = json.loads(line)
            if event.get("event") == name:
                found = event
    return found


def disk(workspace: Path) -> tuple[int, int, int]:
    """(stored responses, their compressed bytes, the state file's bytes)."""
    state = workspace / "state.sqlite"
    with sqlite3.connect(state) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n, size = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM responses").fetchone()
    return int(n), int(size), state.stat().st_size


def order(n: int, storing_only: bool) -> list[str]:
    """Round ``n``'s variants: the broken crawl first (the reparses copy it), then the
    storing pair and the reparses, each in reverse order every other round."""
    pair, reparses = list(STORING), list(REPARSES)
    if n % 2:
        pair.reverse()
        reparses.reverse()
    # the no-op reparse copies the workspace `reparse` left: after it
    return pair if storing_only else ["crawl-broken", *pair, *reparses, "reparse-noop"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=9091, help="detail pages (+ a tenth)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--storing-only", action="store_true", help="only the crawls with and without storing"
    )
    args = parser.parse_args()
    command = ".venv/bin/python bench/bench_reparse.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    work = Path(tempfile.mkdtemp(prefix="bench-reparse-"))
    site = Site(args.cases)
    runs: dict[str, list[Run]] = {v: [] for v in (STORING if args.storing_only else VARIANTS)}
    checks: list[str] = []
    try:
        for n in range(args.rounds):
            broken: Path | None = None
            for variant in order(n, args.storing_only):
                source = runs["reparse"][-1].workspace if variant == "reparse-noop" else broken
                run = run_once(variant, site, work, n, source)
                runs[variant].append(run)
                if variant == "crawl-broken":
                    broken = run.workspace
                extra = ""
                if variant.startswith("reparse"):
                    done = last_event(run.workspace, "reparse_finished").get("counts", {})
                    crawled = last_event(run.workspace, "run_finished").get("counts", {})
                    split = last_event(run.workspace, "reparse_finished").get("cpu_s", {})
                    extra = (
                        f" pages={done.get('pages')} unread={done.get('unchanged_kind')}"
                        f" changed={done.get('items_changed')}"
                        f" new={done.get('items_new')} cpu_writer={split.get('writer')}"
                        f" cpu_workers={split.get('workers')}"
                    )
                    fresh = items(runs["crawl-store"][-1].workspace)
                    if variant == "reparse-noop":
                        if (
                            run.served
                            or done.get("pages")
                            or done.get("unchanged_kind") != crawled.get("ok")
                            or items(run.workspace) != fresh
                        ):
                            checks.append(f"round {n + 1}: {variant} read something: {done}")
                    elif (
                        run.served
                        or done.get("pages", 0) + done.get("unchanged_kind", 0) != crawled.get("ok")
                        # the list pages (one per ten cases) are left unread, but by --all
                        or done.get("unchanged_kind")
                        != (0 if variant == "reparse-all" else -(-args.cases // 10))
                        or done.get("items_changed") != args.cases
                        or any(done.get(k) for k in ("items_new", "rows_new", "errors"))
                        or items(run.workspace) != fresh
                    ):
                        checks.append(f"round {n + 1}: {variant} not equivalent: {done}")
                print(
                    f"round {n + 1} {run.variant:<14} {run.wall:7.2f}s cpu={run.cpu:6.2f}s "
                    f"served={run.served} exit={run.exit_code} load={run.load:.1f}{extra}",
                    flush=True,
                )
        n_store, size_store, state_store = disk(runs["crawl-store"][-1].workspace)
        _, _, state_nostore = disk(runs["crawl-nostore"][-1].workspace)
    finally:
        site.stop()
    print_setup(command, args.cases, site.url, ", shared with other work")
    print()
    print(
        "| variant | median wall s | median CPU s | requests served | failed runs | load (1 min) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    med: dict[str, dict[str, float]] = {}
    for name, rs in runs.items():
        med[name] = {
            "wall": statistics.median(r.wall for r in rs),
            "cpu": statistics.median(r.cpu for r in rs),
        }
        served = statistics.median(r.served for r in rs)
        failed = sum(1 for r in rs if r.exit_code != 0)
        loads = [r.load for r in rs]
        print(
            f"| {name} | {med[name]['wall']:.2f} | {med[name]['cpu']:.2f} | {served:.0f} "
            f"| {failed} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    print()
    store, nostore = runs["crawl-store"], runs["crawl-nostore"]
    cost_cpu = statistics.median(a.cpu / b.cpu for a, b in zip(store, nostore, strict=True))
    cost_wall = statistics.median(a.wall / b.wall for a, b in zip(store, nostore, strict=True))
    per_round = ", ".join(f"{a.cpu / b.cpu:.3f}" for a, b in zip(store, nostore, strict=True))
    if args.storing_only:
        print(
            f"cost of storing responses (crawl-store / crawl-nostore, median of per-round "
            f"ratios): CPU {cost_cpu:.3f}x (per round {per_round}), wall {cost_wall:.3f}x"
        )
        shutil.rmtree(work, ignore_errors=True)
        return
    reparse, reparse1, every = (runs[v] for v in REPARSES)
    paired_wall = statistics.median(c.wall / r.wall for c, r in zip(store, reparse, strict=True))
    paired_cpu = statistics.median(c.cpu / r.cpu for c, r in zip(store, reparse, strict=True))
    one_wall = statistics.median(c.wall / r.wall for c, r in zip(store, reparse1, strict=True))
    one_cpu = statistics.median(c.cpu / r.cpu for c, r in zip(store, reparse1, strict=True))
    all_wall = statistics.median(c.wall / r.wall for c, r in zip(store, every, strict=True))
    all_cpu = statistics.median(c.cpu / r.cpu for c, r in zip(store, every, strict=True))
    print(
        f"reparse speed-up over the crawl (median of per-round ratios): wall "
        f"{paired_wall:.1f}x, CPU {paired_cpu:.1f}x; with --processes 1: wall "
        f"{one_wall:.1f}x, CPU {one_cpu:.1f}x; --all (list pages read too): wall "
        f"{all_wall:.1f}x, CPU {all_cpu:.1f}x"
    )
    noop = runs["reparse-noop"]
    pages_wall = statistics.median(
        c.wall / (r.wall - z.wall) for c, r, z in zip(store, reparse, noop, strict=True)
    )
    print(
        f"a reparse that reads nothing (the same spec again): wall {med['reparse-noop']['wall']:.2f}"
        f" s, CPU {med['reparse-noop']['cpu']:.2f} s, whatever the pages (interpreter, imports,"
        f" checks); the pages alone (reparse minus that, per round): {pages_wall:.1f}x the crawl"
    )
    print(
        f"cost of storing responses (crawl-store / crawl-nostore, median of per-round "
        f"ratios): CPU {cost_cpu:.3f}x (per round {per_round}), wall {cost_wall:.3f}x"
    )
    per_k = 1000 / n_store if n_store else 0.0
    print(
        f"disk per 1,000 pages: {size_store * per_k / 2**20:.2f} MB of compressed bodies "
        f"({n_store} stored); state.sqlite {state_store * per_k / 2**20:.2f} MB with, "
        f"{state_nostore * per_k / 2**20:.2f} MB without"
    )
    print(
        "checks: "
        + (
            "; ".join(checks)
            if checks
            else "every reparse fetched nothing, read every stored detail page (and with "
            "--all every list page; else none), changed every detail item (its court "
            "added) and nothing else, and left the items equal to the fresh crawl's; the "
            "no-op reparse read nothing"
        )
    )
    finish(work, args.keep)


if __name__ == "__main__":
    main()
