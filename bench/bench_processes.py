"""One crawl process vs ``--processes 2`` (vs crawlee-python), same site, same run.

Starts the demo site (``python -m framework.demo.site --cases N --no-edge-cases``) once,
then runs each variant in its own subprocess, alternating variants round by round so
that drift on a shared machine hits all of them alike:

* ``one``    ``framework crawl`` of bench/specs/bench.yaml into a fresh workspace
* ``two``    the same with ``--processes 2`` (two workers sharing the workspace by leases;
  the job's 8 requests per host split 4 + 4)
* ``two-16`` ``--processes 2`` with 16 requests per host in all (8 per worker), the
  number crawlee keeps in flight
* ``crawlee-memory`` / ``crawlee-file``  bench/crawlee_crawl.py (crawlee-python, the same
  extraction as the spec), in-memory and file storage; ``--crawlee ''`` leaves them out

Pages are counted by the site itself (``/_stats``); CPU seconds are the user+system time
of the crawl and every process it started (``RUSAGE_CHILDREN``), so the two workers of
``two`` are both counted. The items of ``one`` and ``two`` are compared field by field
(from their workspaces) in the first round.

    .venv/bin/python bench/bench_processes.py [--cases 3000] [--rounds 5] [--crawlee '']

Loopback only; the site and every crawl are stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import Site, TimedRun, finish
from bench_spider import SPEC

from framework.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FRAMEWORK = [PY, "-c", "import sys; from framework.cli import main; sys.exit(main())"]


@dataclass
class Run(TimedRun):
    site_cpu: float
    exit_code: int
    workspace: Path | None
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after


def command(
    variant: str, site: Site, work: Path, crawlee: str | None
) -> tuple[list[str], Path | None]:
    if variant.startswith("crawlee-"):
        assert crawlee is not None
        storage = variant.removeprefix("crawlee-")
        out = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=work))
        argv = [PY, crawlee, site.url, "--storage", storage, "--out", str(out / "items.jsonl")]
        if storage == "file":
            argv += ["--dir", str(out / "storage")]
        return argv, None
    project = work / "project"
    job = project / "projects" / "bench" / "job.yaml"
    if not job.exists():
        job.parent.mkdir(parents=True)
        job.write_text(SPEC.read_text().replace("{base}", site.url))
    workspace = Path(tempfile.mkdtemp(prefix=f"ws-{variant}-", dir=work))
    argv = [*FRAMEWORK, "crawl", str(job), "--workspace", str(workspace), "-q"]
    if variant.startswith("two"):
        argv += ["--processes", "2"]
    if variant.endswith("-16"):  # crawlee's 16 in flight: 8 per host in each worker
        argv += ["-s", "CONCURRENT_REQUESTS_PER_DOMAIN=16"]
    return argv, workspace


def run_once(variant: str, site: Site, work: Path, n: int, crawlee: str | None) -> Run:
    argv, workspace = command(variant, site, work, crawlee)
    log = work / f"{variant}-{n}.log"
    site.reset()
    load0 = os.getloadavg()[0]
    cpu0 = site.cpu()
    child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.run(argv, cwd=ROOT, stdout=err, stderr=err, check=False)
    wall = time.monotonic() - started
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (child1.ru_utime - child0.ru_utime) + (child1.ru_stime - child0.ru_stime)
    return Run(
        variant,
        wall,
        site.served(),
        cpu,
        site.cpu() - cpu0,
        proc.returncode,
        workspace,
        (load0, os.getloadavg()[0]),
    )


def items(workspace: Path) -> dict[str, dict[str, object]]:
    with Workspace.open(workspace, create=False, readonly=True) as ws:
        return {i.dedupe_key: dict(i.data) for i in ws.store.iter_items(complete_only=False)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--crawlee",
        default=str(ROOT / "bench" / "crawlee_crawl.py"),
        help="the crawlee-python script (bench/crawlee_crawl.py); '' to leave crawlee out",
    )
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    cmd = ".venv/bin/python bench/bench_processes.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    variants = ["one", "two", "two-16"]
    if args.crawlee:
        variants += ["crawlee-memory", "crawlee-file"]
    if args.only:
        variants = [v for v in variants if v in args.only.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    load_start = os.getloadavg()[0]
    site = Site(args.cases)
    runs: dict[str, list[Run]] = {v: [] for v in variants}
    try:
        for n in range(args.rounds):
            for variant in variants:
                run = run_once(variant, site, work, n, args.crawlee)
                runs[variant].append(run)
                print(
                    f"round {n + 1} {variant:<15} {run.wall:6.2f}s {run.pages:6d} pages "
                    f"cpu={run.cpu:6.2f}s ({run.cpu_ms_per_page:.2f} ms/page) "
                    f"site_cpu={run.site_cpu:.2f}s exit={run.exit_code} "
                    f"load {run.load[0]:.1f}->{run.load[1]:.1f}",
                    flush=True,
                )
    finally:
        site.stop()
    print()
    print(f"command: {cmd}")
    print(
        f"site: {args.cases} cases, {site.url}; machine: {os.cpu_count()} cores, "
        f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; python {sys.version.split()[0]}"
    )
    print()
    print("| variant | median wall s | median CPU s | CPU ms/page | pages | failed runs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    med: dict[str, float] = {}
    for name, rs in runs.items():
        wall = statistics.median(r.wall for r in rs)
        med[name] = wall
        print(
            f"| {name} | {wall:.2f} | {statistics.median(r.cpu for r in rs):.2f} | "
            f"{statistics.median(r.cpu_ms_per_page for r in rs):.2f} | "
            f"{statistics.median(r.pages for r in rs):.0f} | "
            f"{sum(1 for r in rs if r.exit_code != 0)} |"
        )
    print()
    for mine in ("two", "two-16"):
        for other in variants:
            if mine not in med or other.startswith("two") or not med.get(other):
                continue
            paired = statistics.median(
                x.wall / y.wall for x, y in zip(runs[mine], runs[other], strict=True)
            )
            print(
                f"wall {mine} / {other}: {med[mine] / med[other]:.3f}x "
                f"(median of per-round ratios {paired:.3f}x)"
            )
    one = runs["one"][0].workspace if "one" in runs else None
    two = runs["two"][0].workspace if "two" in runs else None
    if one is not None and two is not None:
        a, b = items(one), items(two)
        same = a == b
        print(f"items one vs two (round 1): {len(a)} vs {len(b)}, identical: {same}")
    finish(work, args.keep)


if __name__ == "__main__":
    main()
