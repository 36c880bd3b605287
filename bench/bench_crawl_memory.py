"""Peak memory of a crawl as the workspace grows: it must stay flat (no whole-table loads).

Crawls the demo site (a child process) with N cases, each a detail page and three
sub-tabs (about 4.1 rows per case), into a fresh workspace, and reads the crawler's
peak RSS by sampling the crawler process every 50 ms. Then resumes a finished 100k-row
workspace to show that a resume's memory does not grow with the ok rows either.

    .venv/bin/python bench/bench_crawl_memory.py [--cases 2500 25000]

Not a test: timings and memory vary with the machine; the figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
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
name: memory-bench
source_type: bench
start_urls: ["{base}/cases"]
settings: {{CONCURRENT_REQUESTS: 32, LOG_LEVEL: INFO}}
list:
  each: "table.cases tbody tr"
  follow: "a.detail::attr(href)"
  next: "a.next::attr(href)"
  fields: {{status: "td.status::text"}}
detail:
  id: {{css: "#case-number::text", required: true}}
  fields:
    title: {{css: "h1.title::text", required: true}}
    filed: {{css: ".filed::text", type: date, format: "%d.%m.%Y"}}
    amount: {{css: [".amount::text", "[data-field=amount]::text"], type: number}}
  subtabs:
    rulings: {{url: "/cases/{{id}}/tab/rulings", format: json, each: "$.rows[*]",
              fields: {{no: {{json: "$.no", type: integer}}}}}}
    hearings: {{url: "/cases/{{id}}/tab/hearings", each: "tbody tr", fields: {{agenda: "td.agenda::text"}}}}
    documents: {{url: "/cases/{{id}}/tab/documents", method: POST, body: {{form: {{case: "{{id}}"}}}},
                each: "li", fields: {{name: "a::text"}}}}
"""


def crawl(spec: Path, ws: Path) -> tuple[float, int, int]:
    """Wall time, peak RSS of the crawler process (sampled every 50 ms), requests made."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    watched = psutil.Process(proc.pid)
    peak = 0
    err_chunks: list[str] = []
    reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()))  # type: ignore[union-attr]
    reader.start()
    while proc.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    proc.wait()
    reader.join()
    wall = time.monotonic() - started
    err = "".join(err_chunks)
    requests = re.search(r"'framework/requests': (\d+)", err)
    if requests is None and "nothing to do" not in err:
        raise SystemExit(f"crawl failed ({proc.returncode}):\n{err[-3000:]}")
    return wall, peak, int(requests.group(1)) if requests else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, nargs="+", default=[2500, 25000])
    args = ap.parse_args()
    print("command: .venv/bin/python bench/bench_crawl_memory.py --cases", *args.cases)
    print(
        f"{'cases':>7} {'rows':>8} {'wall s':>8} {'req/s':>7} {'peak RSS MB':>12}  resume of it: peak MB"
    )
    for cases in args.cases:
        site = subprocess.Popen(
            [sys.executable, "-m", "framework.demo.site", "--port", "0", "--cases", str(cases),
             "--no-edge-cases"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert site.stdout is not None
            base = site.stdout.readline().strip()
            with tempfile.TemporaryDirectory() as tmp:
                spec = Path(tmp) / "job.yaml"
                spec.write_text(SPEC.format(base=base))
                ws = Path(tmp) / "ws"
                wall, peak, requests = crawl(spec, ws)
                _, resume_peak, _ = crawl(spec, ws)  # a finished job: nothing to fetch
                print(
                    f"{cases:>7} {requests:>8} {wall:>8.1f} {requests / wall:>7.0f} "
                    f"{peak / 2**20:>12.1f}  {resume_peak / 2**20:>8.1f}",
                    flush=True,
                )
        finally:
            site.terminate()
            site.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
