"""The value contract through the real CLI against a local site: a crawl, a preview
and a reparse store (or refuse) the same values as the converter table
(tests/extract/value_table.py, the source of truth) for every row a page can carry as
text (250 of 281); a fallback taken because the first source's value failed is drift;
and `validate` refuses rules that could never pass, with file:line:col and exit 2."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.extract.value_table import CRAWL_SLICE, Fail, Row
from tests.fixtures.crawl import events, run_cli, workspace_items
from tests.fixtures.server import LocalServer, QuietHandler

JOB = "values"


def _page() -> bytes:
    cells = "".join(
        f'<p class="f{i}">{html.escape(row.raw)}</p>' for i, row in enumerate(CRAWL_SLICE)
    )
    # the first source of `amount` says N/A: its value fails, the data attribute has it
    cells += '<p class="amount">N/A</p><p data-field="amount">123</p>'
    return f"<html><body>{cells}</body></html>".encode()


class _Handler(QuietHandler):
    def do_GET(self) -> None:  # the page of the slice at /values, nothing else
        body, status = (_page(), 200) if self.path == "/values" else (b"no", 404)
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[LocalServer]:
    handler: type[BaseHTTPRequestHandler] = _Handler
    server = LocalServer(handler).start()
    try:
        yield server
    finally:
        server.stop()


def _field(i: int, row: Row) -> str:
    return json.dumps({"css": f".f{i}::text", "type": row.type, **row.options})


@pytest.fixture
def project(site: LocalServer, tmp_path: Path) -> Path:
    fields = "\n".join(f"      f{i}: {_field(i, row)}" for i, row in enumerate(CRAWL_SLICE))
    spec = tmp_path / "projects" / JOB / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        f"""name: {JOB}
source_type: values
start_urls: ["{site.url}/values"]
pages:
  page:
    id: {{const: "one"}}
    fields:
{fields}
      amount: {{css: [".amount::text", "[data-field=amount]::text"], type: number}}
""",
        encoding="utf-8",
    )
    return tmp_path


def _expect(values: dict[str, Any]) -> None:
    for i, row in enumerate(CRAWL_SLICE):
        got = values[f"f{i}"]
        want = None if isinstance(row.expected, Fail) else row.expected
        assert got == want, (row, got)


@pytest.mark.process
def test_crawl_preview_and_reparse_store_what_the_table_says(project: Path) -> None:
    assert len(CRAWL_SLICE) >= 30
    assert any(isinstance(r.expected, Fail) for r in CRAWL_SLICE)
    spec = str(project / "projects" / JOB / "job.yaml")
    ws = project / "ws"
    r = run_cli("crawl", spec, "--workspace", str(ws), "-q")
    assert r.returncode == 0, r.stderr[-3000:]
    [crawled] = workspace_items(ws).values()
    _expect(crawled)
    assert crawled["amount"] == 123

    # the fallback taken because `.amount` said N/A is drift, as a selector's is
    [drift] = [e for e in events(ws) if e["event"] == "drift"]
    assert (drift["reason"], drift["field"]) == ("fallback", "amount")
    assert "matched fallback #1 (css: [data-field=amount]::text)" in r.stderr

    # preview: the same values; each failure visible with its reason
    r = run_cli("preview", JOB, "--json", cwd=project)
    assert r.returncode == 0, r.stderr[-3000:]
    [record] = json.loads(r.stdout)["records"]
    traced = {f["name"]: f for f in record["fields"]}
    _expect({name: t["value"] if t["outcome"] == "found" else None for name, t in traced.items()})
    for i, row in enumerate(CRAWL_SLICE):
        if isinstance(row.expected, Fail):
            t = traced[f"f{i}"]
            assert t["outcome"] == "failed", (row, t)
            assert row.expected.says in t["error"], (row, t)
    assert (traced["amount"]["value"], traced["amount"]["fallback"]) == (123, True)

    # reparse from the stored page: the same item
    r = run_cli("reparse", spec, "--workspace", str(ws), "-q", "--processes", "1", "--all")
    assert r.returncode == 0, r.stderr[-3000:]
    [reparsed] = workspace_items(ws).values()
    assert reparsed == crawled


BAD_RULES = """name: rules
source_type: rules
start_urls: ["http://127.0.0.1:9/"]
detail:
  id: {css: ".id::text"}
  fields:
    stars: {css: ".s::text", type: integer, enum: ['4', 'five', 5]}
    total: {css: ".t::text", type: number, expected: 'abc'}
    price: {css: ".p::text", type: price, enum: [10]}
    filed: {css: ".f::text", type: date, languages: [id, en]}
    ok: {css: ".o::text", type: integer, enum: [1, 2.0], magnitude: true, pick: last}
    cost: {css: ".c::text", type: price, expected: {amount: 10, currency: "$"}, free: 0}
    when: {css: ".w::text", type: date, languages: [id, en], date_order: DMY}
"""


@pytest.mark.process
def test_validate_refuses_rules_that_can_never_pass(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(BAD_RULES, encoding="utf-8")
    r = run_cli("validate", str(spec))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith(str(spec))]
    where = {line.split(": ", 1)[0].removeprefix(f"{spec}:"): line for line in lines}
    # enum '4' (7:52), 'five' (7:57); expected 'abc' (8:54); enum 10 (9:50); languages (10:53)
    assert set(where) == {"7:52", "7:57", "8:54", "9:50", "10:53"}, lines
    assert "enum value '4' is never the value of an integer field (it reads as 4)" in where["7:52"]
    assert "is not an integer" in where["7:57"]
    assert "expected 'abc' is not a number" in where["8:54"]
    assert "a price is {amount, currency}" in where["9:50"]
    assert "date_order" in where["10:53"]
