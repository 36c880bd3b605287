"""What watching a crawl costs the crawl: the same crawl alone and with the dashboard open.

Each round crawls the bench job (bench/specs/bench.yaml, the demo site started once with
``--cases``) into a fresh workspace twice, in alternating order: once alone, once while
``framework dashboard`` serves that workspace and two clients watch it as people do: a
browser's live stream (``/jobs/bench/stream``, server-sent events) and a Prometheus
scrape of ``/metrics`` every second. The figure is the crawl process's own CPU per page
(its rusage from ``wait4``, so the dashboard's CPU is not counted in it), as a median of
the per-round ratios watched / alone.

    .venv/bin/python bench/bench_dashboard.py --cases 1000 --rounds 6

Loopback only; the site, the dashboard and every client are stopped at the end.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import PY, Site, setting_args  # noqa: E402
from bench_spider import SAME, SPEC  # noqa: E402

CLI = [PY, "-c", "from framework.cli import entry; entry()"]


class Watchers:
    """``framework dashboard`` on the workspace, a live stream reader and a scraper."""

    def __init__(self, project: Path, workspace: Path) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "dashboard", "--workspace", f"bench={workspace}", "--port", "0"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        if port is None:
            self.stop()
            raise RuntimeError("the dashboard did not say where it listens")
        self.port = port
        self.done = threading.Event()
        self.threads = [
            threading.Thread(target=self._stream, daemon=True),
            threading.Thread(target=self._scrape, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _stream(self) -> None:
        while not self.done.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/jobs/bench/stream")
                resp = conn.getresponse()
                while not self.done.is_set() and resp.read1(65536):
                    pass
            except OSError:
                time.sleep(0.2)

    def _scrape(self) -> None:
        while not self.done.wait(1.0):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/metrics")
                conn.getresponse().read()
            except OSError:
                pass

    def stop(self) -> None:
        if hasattr(self, "done"):
            self.done.set()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def crawl(site: Site, project: Path, workspace: Path) -> tuple[float, int]:
    """One crawl into ``workspace``: (its own CPU seconds, pages the site served)."""
    site.reset()
    argv = [*CLI, "crawl", "bench", "--workspace", str(workspace), "-q", *setting_args(SAME)]
    proc = subprocess.Popen(argv, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 4):
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise RuntimeError(f"crawl exited {proc.returncode}: {err[-2000:]}")
    if proc.stderr is not None:
        proc.stderr.close()
    return usage.ru_utime + usage.ru_stime, site.served()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    site = Site(args.cases)
    try:
        project = work / "project"
        job = project / "projects" / "bench" / "job.yaml"
        job.parent.mkdir(parents=True)
        job.write_text(SPEC.read_text().replace("{base}", site.url))
        ratios, alone, watched = [], [], []
        for n in range(args.rounds):
            got: dict[str, float] = {}
            for mode in ("alone", "watched") if n % 2 == 0 else ("watched", "alone"):
                ws = work / f"ws-{n}-{mode}"
                watchers = Watchers(project, ws) if mode == "watched" else None
                try:
                    cpu, pages = crawl(site, project, ws)
                finally:
                    if watchers is not None:
                        watchers.stop()
                got[mode] = cpu / pages * 1000
                shutil.rmtree(ws, ignore_errors=True)
            alone.append(got["alone"])
            watched.append(got["watched"])
            ratios.append(got["watched"] / got["alone"])
            print(
                f"round {n + 1}: alone {got['alone']:.3f} ms/page, "
                f"watched {got['watched']:.3f} ms/page, ratio {ratios[-1]:.3f}",
                flush=True,
            )
        print(
            f"median CPU per page: alone {statistics.median(alone):.3f} ms, "
            f"watched {statistics.median(watched):.3f} ms; "
            f"median ratio watched / alone {statistics.median(ratios):.3f} "
            f"({args.rounds} rounds, {args.cases} cases)"
        )
    finally:
        site.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
