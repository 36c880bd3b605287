"""How many of the machine's cores are idle now: what ``framework reparse --processes
auto`` starts parse workers for (:func:`framework.crawl.reparse.processes_for`).

Kept apart from the reparse (which imports Scrapy, lxml and pydantic: ~0.3 s) so that
the command can take its first sample before those imports: the window measured is
then the start-up the command spends anyway, and nothing is slept.
"""

from __future__ import annotations

import os
import time

__all__ = ["CoreSample", "idle_cores"]


class CoreSample:
    """The machine's CPU clock ticks (``/proc/stat``) and this process's CPU time at one
    moment. Taken when the command starts, so that the window :func:`idle_cores`
    measures is the start-up it spends anyway (imports, loading the spec, checking the
    workspace) rather than a sleep."""

    def __init__(self) -> None:
        self.at = time.monotonic()
        self.ticks = _cpu_times()
        self.own = _own_cpu()


def idle_cores(cores: int, window: float = 0.1, since: CoreSample | None = None) -> float:
    """How many of ``cores`` are idle now: the machine's idle share over at least
    ``window`` seconds from ``since`` (a sample taken now if None; the rest of the
    window is slept) times ``cores``. The CPU this process spent in the window counts
    as idle: it is the reparse's own start-up, not another program. The load average
    would say what the last minute was: right after a crawl of the same pages (the
    usual moment for a reparse) it counts a core the crawl no longer uses. Without
    ``/proc`` (not Linux), the load average is all there is."""
    first = since if since is not None else CoreSample()
    if first.ticks is None:
        try:
            return cores - os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average either: take every core
            return float(cores)
    rest = window - (time.monotonic() - first.at)
    if rest > 0:
        time.sleep(rest)
    second = _cpu_times()
    if second is None:  # pragma: no cover - /proc/stat vanished between two reads
        return float(cores)
    busy = second[0] - first.ticks[0]
    idle = second[1] - first.ticks[1]
    own = min(busy, max(0, round((_own_cpu() - first.own) * _TICKS_PER_S)))
    busy, idle = busy - own, idle + own
    if busy + idle <= 0:
        return float(cores)
    return cores * idle / (busy + idle)


def _own_cpu() -> float:
    return time.process_time()


try:
    _TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat
except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
    _TICKS_PER_S = 100


def _cpu_times() -> tuple[int, int] | None:
    """(busy, idle) clock ticks of the whole machine since boot, from ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    # guest time is already counted in user/nice: the first eight fields only
    return sum(ticks[:8]) - idle, idle
