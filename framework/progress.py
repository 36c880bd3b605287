"""Progress of a long command on stderr, shared by ``crawl``, ``reparse`` and ``ship``.

On a terminal a live line (rich) redrawn in place, above which log lines keep
scrolling; elsewhere (a pipe, a file, CI) a plain ``progress: ...`` line every
``FRAMEWORK_PROGRESS_INTERVAL`` seconds (30 by default), so a log stays readable;
nothing with ``-q``. :class:`LiveLine` is the terminal part the crawl's Scrapy extension
(:mod:`framework.crawl.output`) also uses; :class:`Meter` is the whole thing for a plain
loop over a known number of units (pages, items): done of total, rate and ETA.

A meter costs a clock read per unit; it never raises into the loop it reports on.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

logger = logging.getLogger(__name__)

INTERVAL_ENV = "FRAMEWORK_PROGRESS_INTERVAL"
LIVE_INTERVAL = 0.5  # s between redraws of the live line
LINES_INTERVAL = 30.0  # s between plain lines: a log file, not a screen
LIVE, LINES = "live", "lines"


def terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default stderr) is a terminal."""
    try:
        return bool((stream if stream is not None else sys.stderr).isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def mode(quiet: bool, stream: Any = None) -> str | None:
    """``live`` on a terminal, ``lines`` elsewhere, None (no progress) when quiet."""
    if quiet:
        return None
    return LIVE if terminal(stream) else LINES


def interval(mode: str | None, setting: Any = None) -> float:
    """Seconds between two shows: ``$FRAMEWORK_PROGRESS_INTERVAL``, else ``setting``
    (a job's setting of the same name), else the mode's default. Not a number or not
    above zero: the default."""
    for raw in (os.environ.get(INTERVAL_ENV), setting):
        try:
            value = float(raw) if raw not in (None, "") else 0.0
        except (TypeError, ValueError):
            value = 0.0
        if value > 0:
            return value
    return LIVE_INTERVAL if mode == LIVE else LINES_INTERVAL


def duration(seconds: float) -> str:
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


class LiveLine:
    """One line redrawn in place at the bottom of a terminal (rich ``Live``), gone when
    stopped. Log handlers writing to the real stderr are pointed at the live display's
    proxy meanwhile, so log lines print above the line instead of through it."""

    def __init__(self, console: Any = None, stream: TextIO | None = None) -> None:
        self._console = console
        self._stream = stream
        self._live: Any = None
        self._moved: list[tuple[logging.StreamHandler[Any], Any]] = []

    def start(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = self._console or Console(file=self._stream, stderr=self._stream is None)
        live = Live(console=console, transient=True, auto_refresh=False, redirect_stderr=True)
        live.start()
        for log in (logging.getLogger(), logging.getLogger("framework")):
            for handler in log.handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is sys.__stderr__:
                    self._moved.append((handler, handler.stream))
                    handler.setStream(sys.stderr)
        self._live = live
        # a forced stop (a second Ctrl-C) skips the caller's stop: the terminal still
        # gets its cursor back when the process ends
        atexit.register(self.stop)

    def update(self, text: str) -> None:
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(text), refresh=True)

    def stop(self) -> None:
        for handler, stream in self._moved:
            handler.setStream(stream)
        self._moved.clear()
        if self._live is not None:
            self._live.stop()
            self._live = None
        atexit.unregister(self.stop)


class Meter:
    """Progress of a loop over ``total`` units (None: not known): ``advance`` per unit,
    a line at most every ``interval`` seconds: ``<label>: done/total <unit> (N%) |
    R <unit>/s | ETA h:mm:ss`` and whatever ``detail`` says (counts of the run).

    ``mode`` None shows nothing (``-q``); ``lines`` writes ``progress: <line>`` to
    ``stream``; ``live`` redraws it on the terminal. The rate is over a sliding window
    of ``window_s`` seconds, the ETA from it and what is left."""

    def __init__(
        self,
        label: str,
        total: int | None,
        unit: str,
        mode: str | None,
        *,
        every: float | None = None,
        stream: TextIO | None = None,
        detail: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 10.0,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.mode = mode
        self.every = every if every is not None else interval(mode)
        self.stream = stream
        self.detail = detail
        self.clock = clock
        self.window_s = window_s
        self.done = 0
        self.shown = 0  # lines written or redraws: tests count them
        now = clock()
        self._next = now + self.every
        self._rates: deque[tuple[float, int]] = deque([(now, 0)])
        self._live: LiveLine | None = None

    def __enter__(self) -> Meter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Meter:
        """The live line up (on a terminal); ``stop`` takes it down."""
        if self.mode == LIVE:
            self._live = LiveLine(stream=self.stream)
            try:
                self._live.start()
            except Exception:  # no terminal after all: progress is never worth a failure
                logger.debug("progress: no live line", exc_info=True)
                self._live = None
                self.mode = None
            self._next = self.clock()  # a terminal shows the line from the first unit
        return self

    def stop(self) -> None:
        if self._live is not None:
            self.show()  # the last state, drawn before the transient line goes
            self._live.stop()
            self._live = None

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int) -> None:
        """``done`` units so far; shown when the interval has passed."""
        self.done = done
        if self.mode is None:
            return
        now = self.clock()
        if now >= self._next:
            self._next = now + self.every
            self.show(now)

    def line(self, now: float) -> str:
        self._rates.append((now, self.done))
        while len(self._rates) > 2 and now - self._rates[0][0] > self.window_s:
            self._rates.popleft()
        t0, d0 = self._rates[0]
        rate = (self.done - d0) / (now - t0) if now > t0 else 0.0
        if self.total:
            left = max(0, self.total - self.done)
            share = min(100.0, 100.0 * self.done / self.total)
            text = f"{self.done}/{self.total} {self.unit} ({share:.0f}%)"
        else:
            left = None
            text = f"{self.done} {self.unit}"
        text += f" | {rate:.1f} {self.unit}/s"
        if left is not None and rate > 0:
            text += f" | ETA {duration(left / rate)}"
        if self.detail is not None:
            try:
                extra = self.detail()
            except Exception:  # the counts of a run never stop it
                extra = ""
            if extra:
                text += f" | {extra}"
        return text

    def show(self, now: float | None = None) -> None:
        text = self.line(self.clock() if now is None else now)
        self.shown += 1
        try:
            if self._live is not None:
                self._live.update(f"{self.label}: {text}")
            else:
                stream = self.stream if self.stream is not None else sys.stderr
                stream.write(f"progress: {self.label}: {text}\n")
                stream.flush()
        except (OSError, ValueError):  # a closed pipe: the run goes on without it
            self.mode = None


__all__ = [
    "INTERVAL_ENV",
    "LINES",
    "LIVE",
    "LiveLine",
    "Meter",
    "duration",
    "interval",
    "mode",
    "terminal",
]
