"""Generated spider vs hand-written Scrapy spider, on the same local site, same run.

Starts the demo site (``python -m framework.demo.site --cases N --no-edge-cases``) once,
then runs each variant in its own subprocess, alternating variants round by round so that
drift on a shared machine hits all of them alike:

* ``generated``    ``scrapy crawl bench`` of bench/specs/bench.yaml, settings ``SAME``
* ``handwritten``  ``scrapy runspider bench/handwritten_spider.py``, settings ``SAME``
* ``generated-defaults``    the framework's own defaults (no ``-s``)
* ``handwritten-defaults``  Scrapy's own defaults (no ``-s``)

``--issue15`` compares instead (issue 15): the generated spider as shipped, without group
commit (``FRAMEWORK_COMMIT_BATCH=1``), with a 5 ms window, with 16 requests per host, with
Scrapy's components that generated jobs switch off turned back on (``full``), the
hand-written spider, and crawlee-python (bench/crawlee_crawl.py) with in-memory and with
file storage. ``--lean`` turns the switched-off components back on one at a time.

Both spiders write the same JSON-lines feed (``-o``); the first feeds of the two are
compared item by item, so the figures are for the same extraction. Pages are counted by
the site itself (``/_stats``), and the site's CPU seconds are reported, so a slow server
cannot pass unnoticed. ``--sweep`` measures the hand-written spider under several
CONCURRENT_ITEMS / CONCURRENT_REQUESTS(_PER_DOMAIN) values instead.

    .venv/bin/python bench/bench_spider.py [--cases 3000] [--rounds 3] [--sweep|--issue15|--lean]

Loopback only; the site and every crawl are stopped (terminated, waited) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import PY, ROOT, Site, finish, print_setup, setting_args

SCRAPY = [PY, "-m", "scrapy"]
SPEC = ROOT / "bench" / "specs" / "bench.yaml"
HANDWRITTEN = ROOT / "bench" / "handwritten_spider.py"
CRAWLEE = ROOT / "bench" / "crawlee_crawl.py"

# Every child runs with Python's bytecode cache, as on a user's machine. This project's
# sandbox sets PYTHONDONTWRITEBYTECODE: then each run of the framework (an editable
# install, its .pyc never written) compiled its ~140 modules from source, ~0.4 s of CPU
# per process, while Scrapy and crawlee ran from the .pyc pip wrote at install time.
# The first run of a bench writes the cache; rounds alternate, so every variant but the
# first run of the first round starts warm. (bench_processes and bench_reparse import
# this module, so it holds for them too.)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The settings both spiders get in the "same settings" comparison: the framework's
# defaults that Scrapy users can set too (framework/settings.py), spelled out for both.
SAME: dict[str, str] = {
    "LOG_LEVEL": "INFO",
    "CONCURRENT_ITEMS": "10",
    "CONCURRENT_REQUESTS": "16",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "8",
    "ROBOTSTXT_OBEY": "True",
    "TELNETCONSOLE_ENABLED": "False",
    "REMOTE_CONTROL_ENABLED": "False",
}
FIELDS = (
    "source_id",
    "title",
    "court",
    "filed",
    "amount",
    "room",
    "plaintiff",
    "defendant",
    "judges",
)


@dataclass(frozen=True)
class Variant:
    name: str
    spider: str  # "generated" | "handwritten" | "crawlee" (settings: {"storage": ...})
    settings: dict[str, str] = field(default_factory=dict)


@dataclass
class Run:
    variant: str
    wall: float
    pages: int
    items: int
    exit_code: int
    site_cpu: float
    cpu: float  # the crawl process's user+system seconds: robust to a busy machine
    feed: Path

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall if self.wall else 0.0


def generated_command(
    variant: Variant, site: Site, work: Path, feed: Path
) -> tuple[list[str], dict[str, str]]:
    """How the generated spider is run: ``scrapy crawl <job>`` from the repo root, with
    the job's project root and a fresh workspace (JOBDIR) per run under ``work``.
    (One function, so switching to ``framework crawl`` is a one-line change.)"""
    project = work / "project"
    job = project / "projects" / "bench" / "job.yaml"
    if not job.exists():
        job.parent.mkdir(parents=True)
        job.write_text(SPEC.read_text().replace("{base}", site.url))
    # A fresh workspace (the job's JOBDIR) per run: an old one would resume, not crawl.
    workspace = Path(tempfile.mkdtemp(prefix="ws-", dir=work))
    argv = [*SCRAPY, "crawl", "bench", "-o", f"{feed}:jsonlines"]
    argv += setting_args({"FRAMEWORK_ROOT": str(project), "JOBDIR": str(workspace)})
    argv += setting_args(variant.settings)
    return argv, {"FRAMEWORK_HOME": str(project)}


def handwritten_command(variant: Variant, site: Site, feed: Path) -> list[str]:
    argv = [*SCRAPY, "runspider", str(HANDWRITTEN), "-a", f"base={site.url}"]
    return [*argv, "-o", f"{feed}:jsonlines", *setting_args(variant.settings)]


def run_once(variant: Variant, site: Site, work: Path, n: int) -> Run:
    feed = work / f"{variant.name}-{n}.jsonl"
    log = work / f"{variant.name}-{n}.log"
    env = dict(os.environ)
    if variant.spider == "generated":
        argv, extra = generated_command(variant, site, work, feed)
        env.update(extra)
    elif variant.spider == "crawlee":
        storage = variant.settings.get("storage", "memory")
        argv = [PY, str(CRAWLEE), site.url, "--storage", storage, "--out", str(feed)]
        if storage == "file":
            argv += ["--dir", tempfile.mkdtemp(prefix="crawlee-", dir=work)]
    else:
        argv = handwritten_command(variant, site, feed)
    site.reset()
    cpu0 = site.cpu()
    child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=err, stderr=err, check=False)
    wall = time.monotonic() - started
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (child1.ru_utime - child0.ru_utime) + (child1.ru_stime - child0.ru_stime)
    items = sum(1 for _ in feed.open()) if feed.exists() else 0
    site_cpu = site.cpu() - cpu0
    return Run(variant.name, wall, site.served(), items, proc.returncode, site_cpu, cpu, feed)


def compare_feeds(a: Path, b: Path) -> str:
    def load(p: Path) -> dict[str, dict[str, Any]]:
        rows = (json.loads(line) for line in p.open())
        return {r["source_id"]: {k: r.get(k) for k in FIELDS} for r in rows}

    if not a.exists() or not b.exists():
        return "not compared (a feed is missing)"
    left, right = load(a), load(b)
    if left.keys() != right.keys():
        return f"DIFFERENT ids: {len(left.keys() ^ right.keys())} not in both"
    differ = [k for k in left if left[k] != right[k]]
    if differ:
        return f"DIFFERENT: {len(differ)} of {len(left)} items, e.g. {differ[0]}: {left[differ[0]]} vs {right[differ[0]]}"
    return f"identical ({len(left)} items, fields {', '.join(FIELDS)})"


def summarize(runs: list[Run]) -> dict[str, float]:
    return {
        "wall": statistics.median(r.wall for r in runs),
        "pages_per_s": statistics.median(r.pages_per_s for r in runs),
        "pages": statistics.median(r.pages for r in runs),
        "items": statistics.median(r.items for r in runs),
        "site_cpu": statistics.median(r.site_cpu for r in runs),
        "cpu": statistics.median(r.cpu for r in runs),
        "failed": sum(1 for r in runs if r.exit_code != 0),
    }


# Scrapy components that generated jobs switch off (framework/settings.py), and the
# settings that turn each back on. The downloader ones need the framework's whole
# mapping (a `-s` of a mapping replaces it).
def _lean_components() -> dict[str, dict[str, str]]:
    from framework.settings import default_settings

    dl = default_settings("bench")["DOWNLOADER_MIDDLEWARES"]
    base = "scrapy.downloadermiddlewares."

    def downloader(name: str, order: int) -> dict[str, str]:
        return {"DOWNLOADER_MIDDLEWARES": json.dumps({**dl, base + name: order})}

    def spider(name: str, order: int) -> dict[str, str]:
        return {"SPIDER_MIDDLEWARES": json.dumps({"scrapy.spidermiddlewares." + name: order})}

    return {
        "httpauth": downloader("httpauth.HttpAuthMiddleware", 300),
        "offsite": downloader("offsite.OffsiteMiddleware", 50),
        "downloader-stats": {"DOWNLOADER_STATS": "True"},
        "depth": spider("depth.DepthMiddleware", 900),
        "httperror": spider("httperror.HttpErrorMiddleware", 50),
        "metacopy": spider("metacopy.MetaCopyDetectionMiddleware", 1000),
    }


def _all_back_on() -> dict[str, str]:
    comps = _lean_components()
    dl: dict[str, Any] = {}
    sp: dict[str, Any] = {}
    for c in comps.values():
        for key, into in (("DOWNLOADER_MIDDLEWARES", dl), ("SPIDER_MIDDLEWARES", sp)):
            for k, v in json.loads(c.get(key, "{}")).items():
                if v is not None or k not in into:
                    into[k] = v
    return {
        "DOWNLOADER_MIDDLEWARES": json.dumps(dl),
        "SPIDER_MIDDLEWARES": json.dumps(sp),
        "DOWNLOADER_STATS": "True",
    }


def main_variants(sweep: bool, issue15: bool = False, lean: bool = False) -> list[Variant]:
    if issue15:
        return [
            Variant("generated", "generated"),
            Variant("generated-nogroup", "generated", {"FRAMEWORK_COMMIT_BATCH": "1"}),
            Variant("generated-window5", "generated", {"FRAMEWORK_COMMIT_WINDOW_MS": "5"}),
            Variant(
                "generated-host16",
                "generated",
                {"CONCURRENT_REQUESTS": "32", "CONCURRENT_REQUESTS_PER_DOMAIN": "16"},
            ),
            Variant("generated-full", "generated", _all_back_on()),
            Variant("handwritten", "handwritten", dict(SAME)),
            Variant("crawlee-memory", "crawlee", {"storage": "memory"}),
            Variant("crawlee-file", "crawlee", {"storage": "file"}),
        ]
    if lean:
        out = [Variant("generated", "generated")]
        out += [Variant(f"generated+{n}", "generated", c) for n, c in _lean_components().items()]
        return out
    if not sweep:
        return [
            Variant("generated", "generated", dict(SAME)),
            Variant("handwritten", "handwritten", dict(SAME)),
            Variant("generated-defaults", "generated"),
            Variant("handwritten-defaults", "handwritten"),
        ]
    out = []
    for items, total, per_domain in (
        ("100", "16", "8"),
        ("10", "16", "8"),
        ("10", "16", "16"),
        ("10", "32", "32"),
        ("10", "64", "64"),
    ):
        settings = dict(SAME)
        settings.update(
            CONCURRENT_ITEMS=items,
            CONCURRENT_REQUESTS=total,
            CONCURRENT_REQUESTS_PER_DOMAIN=per_domain,
        )
        out.append(Variant(f"hw-items{items}-req{total}-dom{per_domain}", "handwritten", settings))
    # Which of Scrapy's defaults cost the most: change one at a time.
    out.append(Variant("hw-scrapy-defaults", "handwritten"))
    out.append(Variant("hw-scrapy-defaults+items10", "handwritten", {"CONCURRENT_ITEMS": "10"}))
    out.append(Variant("hw-scrapy-defaults+log-info", "handwritten", {"LOG_LEVEL": "INFO"}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cases", type=int, default=3000, help="detail pages (list pages: a tenth)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--sweep", action="store_true", help="concurrency settings, hand-written spider"
    )
    parser.add_argument(
        "--peers",
        "--issue15",  # the older name, kept for scripts that use it
        dest="issue15",
        action="store_true",
        help="group commit, lean jobs, crawlee-python",
    )
    parser.add_argument(
        "--lean", action="store_true", help="switched-off components back on, one at a time"
    )
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, feeds)")
    args = parser.parse_args()
    command = ".venv/bin/python bench/bench_spider.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    variants = main_variants(args.sweep, args.issue15, args.lean)
    if args.only:
        wanted = set(args.only.split(","))
        variants = [v for v in variants if v.name in wanted]
    work = Path(tempfile.mkdtemp(prefix="bench-spider-"))
    site = Site(args.cases)
    runs: dict[str, list[Run]] = {v.name: [] for v in variants}
    try:
        for n in range(args.rounds):
            for variant in variants:
                run = run_once(variant, site, work, n)
                runs[variant.name].append(run)
                print(
                    f"round {n + 1} {variant.name:<34} {run.wall:6.2f}s {run.pages:6d} pages "
                    f"{run.pages_per_s:6.0f}/s items={run.items} exit={run.exit_code} "
                    f"cpu={run.cpu:.2f}s site_cpu={run.site_cpu:.2f}s",
                    flush=True,
                )
    finally:
        site.stop()
    print_setup(command, args.cases, site.url)
    print("same settings: " + " ".join(f"{k}={v}" for k, v in SAME.items()))
    print(f"load average at the end: {os.getloadavg()}")
    print()
    print(
        "| variant | median wall s | median pages/s | median crawler CPU s | CPU ms/page "
        "| pages | items | site CPU s | failed runs |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    medians = {}
    for name, rs in runs.items():
        m = summarize(rs)
        medians[name] = m
        print(
            f"| {name} | {m['wall']:.2f} | {m['pages_per_s']:.0f} | {m['cpu']:.2f} | "
            f"{1000 * m['cpu'] / m['pages'] if m['pages'] else 0:.2f} | {m['pages']:.0f} | "
            f"{m['items']:.0f} | {m['site_cpu']:.2f} | {m['failed']} |"
        )
    print()
    pairs = [("generated", "handwritten"), ("generated-defaults", "handwritten-defaults")]
    pairs += [(v.name, "generated") for v in variants if v.name != "generated"]
    for a, b in pairs:
        if a in medians and b in medians and medians[b]["wall"]:
            ratio = medians[a]["wall"] / medians[b]["wall"]
            cpu_ratio = medians[a]["cpu"] / medians[b]["cpu"] if medians[b]["cpu"] else 0.0
            paired = statistics.median(
                x.wall / y.wall for x, y in zip(runs[a], runs[b], strict=True)
            )
            print(f"wall-time ratio {a} / {b}: {ratio:.3f}x (crawler CPU: {cpu_ratio:.3f}x)")
            print(f"  median of the per-round wall-time ratios: {paired:.3f}x")
            print(f"  items: {compare_feeds(runs[a][0].feed, runs[b][0].feed)}")
    finish(work, args.keep)


if __name__ == "__main__":
    main()
