"""Stored items out to a file, through Scrapy's own item exporters.

``framework export`` writes EVERY item a workspace holds (optionally only the complete
ones, or those scraped since a time), read through a read-only workspace, so it works
while a crawl runs and never changes the state. A crawl's ``-o``/``-O`` is Scrapy's
feed export and sees only the records that run completed; this is the whole harvest.

Formats are Scrapy's (:mod:`scrapy.exporters`), chosen by the file's extension:

* ``.jsonl`` (also ``.jl``) and ``.json``: the items exactly as stored (the dict a
  crawl emits: ``dedupe_key``, ``source_type``, ``source_id`` and the data), with the
  URL of the page each came from as ``url`` after the keys (:func:`item_dict`); text
  that would act on a terminal or an editor rather than show (DEL, C1 controls,
  bidirectional marks, U+2028/U+2029) is written as ``\\u`` escapes, the same JSON
  (:mod:`framework.exporters`).
* ``.csv``: one row per item, one column per key of any item (in first-seen order);
  CSV is text, so a cell holds a string as is, a number or flag as its JSON text
  (``12.5``, ``true``), a list or record as JSON, and null as an empty cell; a cell a
  spreadsheet would run as a formula is written as text (:mod:`framework.exporters`).
* ``.xml``: ``<items><item>...``, lists as ``<value>`` children and records as child
  elements (Scrapy's form); XML has no null, so null and empty lists are left out. A
  key that is no XML name is ``<field name="...">`` (:mod:`framework.exporters`).

The feed arguments of a crawl (``-o``/``-O``, Scrapy's syntax) are checked here too,
so an unknown extension or a symlink where the file goes is one line
(:class:`~framework.errors.UsageError`), not Scrapy's traceback; their files are written
by :class:`~framework.exporters.FeedFileStorage` (``FEED_STORAGES`` in
:mod:`framework.scrapy_settings`), private and never through a symlink, as an export's
are. This module reads the workspace only; it must not write to it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from framework.errors import FrameworkError, UsageError
from framework.files import PRIVATE_FILE, link_refused, make_private_dir
from framework.workspace import StoredItem, Workspace
from framework.workspace.records import PAGE_URL_KEYS, page_url_meta

__all__ = [
    "FORMATS",
    "PAGE_URL_KEYS",
    "ExportResult",
    "export_items",
    "feed_settings",
    "format_of",
    "item_dict",
]

#: extension -> Scrapy exporter, for ``framework export``
FORMATS: dict[str, str] = {
    "jsonl": "framework.exporters.JsonLinesExporter",  # what acts on a terminal escaped
    "jl": "framework.exporters.JsonLinesExporter",
    "json": "framework.exporters.JsonExporter",
    "csv": "framework.exporters.CsvExporter",  # formulas written as text
    "xml": "framework.exporters.XmlExporter",  # any key, any text: well-formed
}


@dataclass(frozen=True)
class ExportResult:
    target: str  # the file, or "-" for stdout
    format: str
    items: int
    stored: int = 0  # items the workspace holds: those written and those the filters left


def format_of(target: str, fmt: str | None = None) -> str:
    """The export format of ``target`` (``fmt`` wins; ``-`` defaults to jsonl), or a
    one-line UsageError naming the formats there are."""
    if fmt is None:
        fmt = "jsonl" if target == "-" else Path(target).suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        shown = f"extension {fmt!r}" if fmt else "no extension"
        raise UsageError(
            f"cannot export to {target!r} ({shown}): use one of "
            f"{', '.join('.' + f for f in FORMATS)}, or --format"
        )
    return fmt


def item_dict(item: StoredItem) -> dict[str, Any]:
    """A stored item as ``export`` writes it: the crawl's item (``dedupe_key``,
    ``source_type``, ``source_id``, the data) with the page it came from as ``url``.

    The URL is metadata beside the keys, never data: it is not in the content hash, so
    a page that moved does not make its item changed. Secret-looking query parameters
    are masked, as everywhere the framework writes a URL. The item's own fields win: a
    record that declares a field ``url`` keeps it, and the page's URL is ``page_url``
    then (left out if that name is a field too)."""
    meta: dict[str, str | None] = {
        "dedupe_key": item.dedupe_key,
        "source_type": item.source_type,
        "source_id": item.source_id,
        **page_url_meta(item.data, item.url),
    }
    return {**meta, **item.data}


def since_filter(value: str) -> str:
    """``--since`` in the form the workspace writes times (UTC, ISO, to the second), so
    stored times compare as text; a time without a zone is UTC. A bad value is a
    UsageError."""
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since expects an ISO time (2026-01-31 or 2026-01-31T12:00:00Z), got {value!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _selected(ws: Workspace, only_complete: bool, since: str | None) -> Iterator[StoredItem]:
    for item in ws.store.iter_items(complete_only=only_complete):
        # stored times are UTC ISO text; the first 19 characters are the second
        if since is not None and item.last_scraped[:19] < since:
            continue
        yield item


def export_items(
    workspace: Path | str,
    target: str,
    *,
    fmt: str | None = None,
    only_complete: bool = False,
    since: str | None = None,
    keep_formulas: bool = False,
) -> ExportResult:
    """Write the workspace's items to ``target`` (``-``: stdout). A file is replaced
    whole and only once complete (written beside it, then renamed), so a reader never
    sees half an export and an interrupted export leaves the old file. Missing folders
    are created 0700 (as a crawl's ``-o`` does); the file gets the mode the old one had,
    or, new, 0600 (its items come from logged-in pages). A symlink at ``target`` is
    refused, not replaced nor written through. A path that cannot be written is a
    :class:`UsageError`, a write that fails midway (a full disk) a
    :class:`FrameworkError`: one line each, the old file left as it was."""
    fmt = format_of(target, fmt)
    cutoff = since_filter(since) if since is not None else None
    with Workspace.open(workspace, create=False, readonly=True) as ws:
        stored = sum(ws.store.item_counts().values())
        fields = _columns(ws, only_complete, cutoff) if fmt == "csv" else None
        if target == "-":
            out = sys.stdout.buffer
            n = _write(out, fmt, _selected(ws, only_complete, cutoff), fields, keep_formulas)
            out.flush()
            return ExportResult(target, fmt, n, stored)
        path = Path(target)
        if path.is_symlink():
            raise link_refused(path)
        if path.is_dir():
            raise UsageError(f"cannot export to {target!r}: it is a folder; name a file in it")
        folder = path.parent if str(path.parent) else Path(".")
        try:
            make_private_dir(folder)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
        except OSError as exc:
            raise UsageError(f"cannot write {target!r}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                # mkstemp's file is private (0600); one that replaces another keeps
                # the mode its owner gave it
                os.fchmod(fh.fileno(), _mode(path))
                n = _write(fh, fmt, _selected(ws, only_complete, cutoff), fields, keep_formulas)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise FrameworkError(
                f"writing {target!r} failed: {exc.strerror or exc}; "
                f"{'the old file is left as it was' if path.exists() else 'nothing written'}"
            ) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return ExportResult(target, fmt, n, stored)


def _mode(path: Path) -> int:
    """The permission bits of the file that ``path`` replaces, or, for a new one (or a
    symlink planted since it was refused: replaced, never followed), the owner's only
    (0600): whatever the umask, exported items stay as private as the workspace they
    come from."""
    try:
        st = path.lstat()
    except OSError:
        return PRIVATE_FILE
    return PRIVATE_FILE if stat.S_ISLNK(st.st_mode) else stat.S_IMODE(st.st_mode)


def _columns(ws: Workspace, only_complete: bool, since: str | None) -> list[str]:
    """Every key of every selected item, in first-seen order: items of one job differ
    (a sub-tab not fetched yet), and CSV needs its header before the first row."""
    seen: dict[str, None] = {}
    for item in _selected(ws, only_complete, since):
        seen.update(dict.fromkeys(item_dict(item)))
    return list(seen)


def _write(
    out: IO[bytes],
    fmt: str,
    items: Iterator[StoredItem],
    fields: Sequence[str] | None,
    keep_formulas: bool = False,
) -> int:
    from scrapy.utils.misc import load_object

    exporter_cls = load_object(FORMATS[fmt])
    kwargs: dict[str, Any] = {"encoding": "utf-8"}
    if fmt == "csv":
        kwargs["fields_to_export"] = list(fields or [])
        kwargs["keep_formulas"] = keep_formulas
    exporter = exporter_cls(out, **kwargs)
    exporter.start_exporting()
    n = 0
    for item in items:
        data = item_dict(item)
        if fmt == "csv":
            data = {k: csv_cell(v) for k, v in data.items()}
        elif fmt == "xml":
            data = xml_value(data)
        exporter.export_item(data)
        n += 1
    exporter.finish_exporting()
    if fmt == "json":
        out.write(b"\n")  # a text file ends with a newline
    return n


def csv_cell(value: Any) -> str:
    """One CSV cell: strings as they are, null empty, anything else as JSON text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def xml_value(value: Any) -> Any:
    """What XML can say of a value: no nulls and no empty lists or records (left out);
    numbers and flags as their JSON text, so ``true`` reads the same as in JSON."""
    if isinstance(value, Mapping):
        kept = {k: xml_value(v) for k, v in value.items() if not _absent(v)}
        return kept
    if isinstance(value, list | tuple):
        return [xml_value(v) for v in value if not _absent(v)]
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, list | tuple | Mapping) and not value)


def _feed_path(uri: str) -> Path | None:
    """The local file a feed URI names (a plain path or ``file:``), or None (s3:, ...)."""
    from w3lib.url import file_uri_to_path

    scheme = urlsplit(uri).scheme
    if scheme == "file":
        return Path(file_uri_to_path(uri))
    return Path(uri) if scheme == "" else None


def feed_settings(output: Sequence[str], overwrite: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The FEEDS setting for a crawl's ``-o``/``-O`` (Scrapy's syntax: ``FILE`` with a
    known extension, or ``URI:FORMAT``), or a one-line UsageError: Scrapy raises its
    own with a traceback when the format is unknown."""
    from scrapy.exceptions import UsageError as ScrapyUsageError
    from scrapy.settings import Settings
    from scrapy.utils.conf import feed_process_params_from_cli

    from framework import scrapy_settings

    if not output and not overwrite:
        return {}
    if output and overwrite:
        raise UsageError("use either -o (append) or -O (overwrite), not both")
    settings = Settings()
    settings.setmodule(scrapy_settings, priority="project")
    try:
        feeds: dict[str, dict[str, Any]] = feed_process_params_from_cli(
            settings, list(output), overwrite_output=list(overwrite) or None
        )
    except ScrapyUsageError as exc:
        formats = ", ".join(sorted(settings.getwithbase("FEED_EXPORTERS")))
        bad = [o for o in (*output, *overwrite) if _feed_format(o, formats) is None]
        what = bad[0] if bad else ", ".join((*output, *overwrite))
        raise UsageError(
            f"-o/-O {what!r}: unknown feed format; use a file ending in one of "
            f"{formats} (or FILE:FORMAT)"
        ) from exc
    for uri in feeds:
        path = _feed_path(uri)
        if path is not None and path.is_symlink():
            raise link_refused(path)  # before the crawl, not at its first item
    return feeds


def _feed_format(element: str, formats: str) -> str | None:
    known = formats.split(", ")
    _uri, sep, fmt = element.rpartition(":")
    if sep and fmt in known:
        return fmt
    suffix = Path(element).suffix.lstrip(".")
    return suffix if suffix in known else None
