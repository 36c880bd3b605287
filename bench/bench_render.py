"""Rendered pages per second vs plain HTTP on the same demo site, and the peak PSS of the
whole crawl process tree (the crawler, Playwright's driver, every Chromium process).

Serves the demo site (a child process) with N cases and crawls, each into a fresh
workspace, list pages + detail pages (no sub-tabs):

* ``http``: the static pages (/cases), Scrapy's HTTP client;
* ``render-P``: the JS variant (/js/cases) with ``render: playwright`` and P pages, each
  page reused between requests (the plugin's page pool; the default);
* ``fresh-P``: the same, but a new page per request and closed after it
  (``-s FRAMEWORK_RENDER_REUSE=false``: scrapy-playwright's own behaviour, the baseline
  of issue 11).

Pages/s is counted over the crawl's requests (first to last line of urls.jsonl), so the
browser's start-up is not in it; the wall time with start-up is printed too. PSS is
sampled every 0.5 s over the process tree.

    .venv/bin/python bench/bench_render.py [--cases 150] [--pages 4 8] [--repeat 1]

Not a test: figures vary with the machine and its load; they go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

CLI = [sys.executable, "-c", "import sys; from framework.cli import main; sys.exit(main())"]

SPEC = """\
name: render-bench
source_type: bench
start_urls: ["{base}{start}"]
render: {render}
settings: {{CONCURRENT_REQUESTS: 16, CONCURRENT_REQUESTS_PER_DOMAIN: 16{extra}}}
list:
  each: "table.cases tbody tr"
  follow: "a.detail::attr(href)"
  next: "a.next::attr(href)"
  fields: {{status: "td.status::text"}}
{list_browser}detail:
{detail_browser}  id: {{css: "#case-number::text", required: true}}
  fields:
    title: {{css: "h1.title::text", required: true}}
    filed: {{css: ".filed::text", type: date, format: "%d.%m.%Y"}}
    amount: {{css: [".amount::text", "[data-field=amount]::text"], type: number}}
    judges: {{css: "ul.judges li::text", many: true}}
"""


def spec_text(base: str, mode: str, pages: int) -> str:
    if mode == "http":
        return SPEC.format(
            base=base, start="/cases", render="http", extra="", list_browser="", detail_browser=""
        )
    return SPEC.format(
        base=base,
        start="/js/cases",
        render="playwright",
        extra=f", PLAYWRIGHT_MAX_PAGES_PER_CONTEXT: {pages}",
        list_browser='  browser: {wait_for: "div.pager"}\n',
        detail_browser='  browser: {wait_for: "#case-number"}\n',
    )


def tree_pss(root: psutil.Process) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += proc.memory_full_info().pss
    return total


def crawl(spec: Path, ws: Path, extra: list[str]) -> dict[str, object]:
    started = time.monotonic()
    proc = subprocess.Popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-L", "INFO", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    root = psutil.Process(proc.pid)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            try:
                peak = max(peak, tree_pss(root))
            except psutil.NoSuchProcess:
                return
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    lines = [json.loads(x) for x in (ws / "urls.jsonl").read_text().splitlines() if x]
    pages = [x for x in lines if x["kind"] in ("list", "detail")]
    times = [dt.datetime.fromisoformat(x["time"]) for x in pages]
    span = (max(times) - min(times)).total_seconds() if len(times) > 1 else float("nan")
    stats = {k: int(v) for k, v in re.findall(r"'framework/render/(\w+)': (\d+)", err)}
    return {
        "exit": proc.returncode,
        "pages": len(pages),
        "ok": sum(1 for x in pages if x["outcome"] == "ok"),
        "span_s": span,
        "pages_per_s": (len(pages) - 1) / span if span == span and span > 0 else float("nan"),
        "wall_s": wall,
        "peak_pss_mib": peak / 2**20,
        **stats,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=150)
    parser.add_argument("--pages", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--modes", nargs="+", default=["http", "render", "fresh"])
    parser.add_argument("--set", nargs="*", default=[], help="extra -s NAME=VALUE for rendering")
    args = parser.parse_args()
    site = subprocess.Popen(
        [sys.executable, "-m", "framework.demo.site", "--port", "0", "--cases", str(args.cases)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert site.stdout is not None
    base = site.stdout.readline().strip()
    print(
        f"# site {base}, {args.cases} cases, {psutil.cpu_count()} CPUs, load {psutil.getloadavg()}"
    )
    print(
        f"{'mode':<10} {'pages':>5} {'ok':>4} {'pages/s':>8} {'span s':>7} {'wall s':>7} {'PSS MiB':>8}  pool"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
            runs: list[tuple[str, int, list[str]]] = []
            for _ in range(args.repeat):
                if "http" in args.modes:
                    runs.append(("http", 0, []))
                for pages in args.pages:
                    if "render" in args.modes:
                        runs.append((f"render-{pages}", pages, []))
                    if "fresh" in args.modes:
                        runs.append(
                            (f"fresh-{pages}", pages, ["-s", "FRAMEWORK_RENDER_REUSE=false"])
                        )
            for n, (label, pages, extra) in enumerate(runs):
                spec = Path(tmp) / f"run{n}" / "projects" / "render-bench" / "job.yaml"
                spec.parent.mkdir(parents=True)
                spec.write_text(spec_text(base, label.split("-")[0], pages))
                sets = [x for kv in args.set for x in ("-s", kv)] if pages else []
                r = crawl(spec, Path(tmp) / f"ws{n}", [*extra, *sets])
                pool = (
                    f"created {r.get('pages_created')}, reused {r.get('pages_reused')}, "
                    f"discarded {r.get('pages_discarded')}"
                    if "pages_created" in r
                    else ""
                )
                print(
                    f"{label:<10} {r['pages']:>5} {r['ok']:>4} {r['pages_per_s']:>8.1f} "
                    f"{r['span_s']:>7.1f} {r['wall_s']:>7.1f} {r['peak_pss_mib']:>8.0f}  {pool}",
                    flush=True,
                )
    finally:
        site.terminate()
        site.wait(10)


if __name__ == "__main__":
    main()
