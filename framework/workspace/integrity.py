"""Is a workspace whole? The check a crawl runs before it writes, and status reports.

Owns the detection of two kinds of damage, each said in one line with what to do:

* **a damaged state file** (truncated, garbled): SQLite's ``quick_check`` of every page
  (the crawl runs it at start; status meets such a file when it reads it);
* **lost commits**: ``state.sqlite`` rolled back behind its own URL log, as happens when
  its ``-wal`` file is deleted, truncated or garbled after a kill (SQLite silently drops
  the WAL frames it cannot read), or when the folder is restored from an older copy.
  A response's ``urls.jsonl`` line is appended only after its commit, so every ``ok``
  line names a row whose attempt history holds that ``ok`` attempt. Lines of the log's
  tail (:data:`TAIL_BYTES`; a lost WAL only ever takes the latest commits) naming more
  ``ok`` attempts than the database holds prove that rows were lost. Lines written
  before the last ``--fresh`` (meta ``rows_reset_at``) name rows deleted on purpose
  and do not count.

It reads only, never repairs: the cure is a human's (restore the folder, or start over
with ``--fresh``).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from framework.errors import WorkspaceBroken
from framework.workspace.sql import ROWS_RESET_META

if TYPE_CHECKING:
    from framework.workspace.workspace import Workspace

TAIL_BYTES = 4 * 2**20  # of urls.jsonl read by the check: O(1) whatever the log's size
EXAMPLES_MAX = 5

FIX = "restore the workspace folder from a backup, or start over with `crawl --fresh`"


@dataclass(frozen=True)
class Integrity:
    """What the check found. ``whole`` when nothing."""

    damaged: str | None = None  # quick_check's first complaint
    lost_rows: int = 0  # rows the URL log names as ok that the database lacks
    examples: list[int] = field(default_factory=list)  # a few of their ids

    @property
    def whole(self) -> bool:
        return self.damaged is None and self.lost_rows == 0

    def problem(self, ws: Workspace) -> str | None:
        """The one line to print, or None."""
        if self.damaged is not None:
            return f"{ws.state_path}: the workspace state is damaged ({self.damaged}); {FIX}"
        if self.lost_rows:
            ids = ", ".join(str(i) for i in self.examples)
            return (
                f"{ws.path}: urls.jsonl names {self.lost_rows} ok rows that state.sqlite "
                f"lacks (row {ids}{' ...' if self.lost_rows > len(self.examples) else ''}): "
                f"committed rows were lost (a deleted or damaged state.sqlite-wal, or an "
                f"older copy of state.sqlite); {FIX}"
            )
        return None

    def as_dict(self) -> dict[str, object]:
        return {
            "whole": self.whole,
            "damaged": self.damaged,
            "lost_ok_rows": self.lost_rows,
            "lost_examples": list(self.examples),
        }


def check(ws: Workspace, *, deep: bool = False) -> Integrity:
    """Check ``ws``; ``deep`` adds the page-by-page ``quick_check`` (O(database size))."""
    if deep:
        damaged = ws.store.quick_check()
        if damaged is not None:
            return Integrity(damaged=damaged)
    # the log first, then the database: an ok line read here was committed before it
    # was written, so a crawl running meanwhile cannot cause a false alarm
    logged = _ok_lines(ws.path / "urls.jsonl", ws.store.get_meta(ROWS_RESET_META))
    if not logged:
        return Integrity()
    held = ws.store.ok_attempts(list(logged))
    lost = sorted(row for row, n in logged.items() if held.get(row, 0) < n)
    return Integrity(lost_rows=len(lost), examples=lost[:EXAMPLES_MAX])


def ensure_whole(ws: Workspace, *, deep: bool = True) -> None:
    """Raise :class:`~framework.errors.WorkspaceBroken` (exit 4) unless ``ws`` is whole."""
    found = check(ws, deep=deep)
    problem = found.problem(ws)
    if problem is not None:
        raise WorkspaceBroken(problem)


# An ok line as the crawl writes it (crawl/handled.py url_line: compact JSON, "time"
# first, "row" right after "outcome"). Inside a JSON string a quote is always escaped,
# so the marker cannot come from a site's text.
_OK_MARK = b'"outcome":"ok"'
_OK_LINE = re.compile(
    rb'^\{"time":"([^"\\\n]*)",[^\n]*?"outcome":"ok","row":(\d+),[^\n]*\}$', re.MULTILINE
)


def _ok_lines(path: os.PathLike[str] | str, since: str | None) -> Counter[int]:
    """``ok`` lines per row in the log's tail, written after ``since`` (an ISO time)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_BYTES)
            fh.seek(start)
            data = fh.read()
    except FileNotFoundError:
        return Counter()
    if start > 0:
        data = data.partition(b"\n")[2]  # began mid-line
    data = data[: data.rfind(b"\n") + 1]  # after the last "\n": empty, or a torn line
    # Every line as the crawl writes it: one scan, no JSON decoding (about 6 us a line,
    # which every command that checks the workspace paid on a log of thousands of
    # lines). A line written any other way holding the marker: each line decoded.
    found = _OK_LINE.findall(data)
    if len(found) != data.count(_OK_MARK):
        return _decoded(data.split(b"\n"), since)
    counts: Counter[int] = Counter()
    for time, row in found:
        if since is None or time.decode("utf-8", "replace") > since:
            counts[int(row)] += 1
    return counts


def _decoded(lines: list[bytes], since: str | None) -> Counter[int]:
    counts: Counter[int] = Counter()
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("outcome") != "ok":
            continue
        row = line.get("row")
        if not isinstance(row, int) or isinstance(row, bool):
            continue
        if since is not None and not str(line.get("time", "")) > since:
            continue
        counts[row] += 1
    return counts


__all__ = ["TAIL_BYTES", "Integrity", "check", "ensure_whole"]
