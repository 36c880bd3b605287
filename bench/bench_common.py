"""What the bench scripts share: the bench site in a child process, ``-s`` arguments,
a timed run's figures, and the end of a run (its work folder kept or removed).

Plain helpers for the scripts under bench/, not framework code: it imports nothing of
the framework and has no side effects on import (bench_spider's bytecode-cache setting
stays with the scripts that want it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


@dataclass
class TimedRun:
    """One timed run of a variant: wall seconds, the pages the site served and the CPU
    seconds of the crawl's processes (each bench adds what it watches besides)."""

    variant: str
    wall: float
    pages: int
    cpu: float

    @property
    def cpu_ms_per_page(self) -> float:
        return 1000 * self.cpu / self.pages if self.pages else 0.0

    @property
    def pages_per_cpu_s(self) -> float:
        return self.pages / self.cpu if self.cpu else 0.0


class Site:
    """The bench site (the demo site, without its edge cases) in a child process,
    with ``delay`` seconds before each answer (0: none)."""

    def __init__(self, cases: int, delay: float = 0.0) -> None:
        argv = [PY, "-m", "framework.demo.site", "--cases", str(cases), "--no-edge-cases"]
        if delay:
            argv += ["--delay", str(delay)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"bench site did not start: {self.url!r}")
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/_stats/reset", data=b"", method="POST")  # noqa: S310
        urllib.request.urlopen(req, timeout=10).read()  # noqa: S310 - our loopback site

    def served(self) -> int:
        with urllib.request.urlopen(self.url + "/_stats", timeout=10) as resp:  # noqa: S310
            return int(json.load(resp)["total"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def setting_args(settings: dict[str, str]) -> list[str]:
    out: list[str] = []
    for k, v in settings.items():
        out += ["-s", f"{k}={v}"]
    return out


def finish(work: Path, keep: bool) -> None:
    """The end of a run: ``work`` is kept (and named) with ``--keep``, else removed."""
    if keep:
        print(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def print_setup(command: str, cases: int, url: str, machine: str = "") -> None:
    """The head of a bench's report: how it was called, the site (its pages: the case
    pages and one list page per 10 cases) and the machine (``machine``: a note on it)."""
    print()
    print(f"command: {command}")
    print(
        f"site: {cases} cases ({cases + -(-cases // 10)} pages), {url}; "
        f"machine: {os.cpu_count()} cores{machine}; python {sys.version.split()[0]}"
    )
