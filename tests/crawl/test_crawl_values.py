"""The value contract through the real CLI against a local site: a crawl, a preview
and a reparse store (or refuse) the same values as the converter table
(tests/extract/value_table.py, the source of truth) for every row a page can carry as
text, each failure visibly counted as its field's `type_failed` by the crawl, `status`
and a reparse that reads the stored page again; a fallback taken because the first
source's value failed is drift; and `validate` refuses rules that could never pass, and
date fields whose languages disagree on the order of numeric dates, with file:line:col
and exit 2."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from framework.spec.models import ValueType
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


# the fields whose row fails: each one value that failed its type, on the one page
FAILING = {f"f{i}": row for i, row in enumerate(CRAWL_SLICE) if isinstance(row.expected, Fail)}


def _failed(entries: list[dict[str, Any]]) -> dict[str, int]:
    """``type_failed`` entries (an event's, or status's) as ``{field: count}``, each
    entry's example checked against its row's message."""
    out = {}
    for entry in entries:
        assert entry["kind"] == "page", entry
        row = FAILING.get(entry["field"])
        assert row is not None, f"{entry['field']} failed its type, its row does not: {entry}"
        assert isinstance(row.expected, Fail)
        assert entry["records"] == 1, entry
        if not entry["text"].endswith("\u2026"):  # the failure's message, unless cut
            assert row.expected.says in entry["text"], (row, entry)
        out[entry["field"]] = entry["count"]
    return out


def _expect(values: dict[str, Any]) -> None:
    for i, row in enumerate(CRAWL_SLICE):
        got = values[f"f{i}"]
        want = None if isinstance(row.expected, Fail) else row.expected
        assert got == want, (row, got)


@pytest.mark.process
def test_crawl_preview_and_reparse_store_what_the_table_says(project: Path) -> None:
    assert len(CRAWL_SLICE) >= 150
    assert len(FAILING) >= 50
    # every type, booleans and strings too, as page text
    assert {r.type for r in CRAWL_SLICE} == {t.value for t in ValueType}
    spec_file = project / "projects" / JOB / "job.yaml"
    spec = str(spec_file)
    ws = project / "ws"
    r = run_cli("crawl", spec, "--workspace", str(ws), "-q")
    assert r.returncode == 0, r.stderr[-3000:]
    [crawled] = workspace_items(ws).values()
    _expect(crawled)
    assert crawled["amount"] == 123

    # each failure is visible, not only a null: its field's type_failed, one value each,
    # in the run's event and in `status` (the fallback of `amount` is no failure)
    [finished] = [e for e in events(ws) if e["event"] == "run_finished"]
    assert _failed(finished["type_failed"]) == dict.fromkeys(FAILING, 1)
    status = run_cli("status", JOB, "--workspace", str(ws), "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    fill = json.loads(status.stdout)["fill_rates"]
    assert _failed(fill["type_failed"]) == dict.fromkeys(FAILING, 1)
    rates = fill["last_run"]["page"]["fields"]
    assert {f for f, share in rates.items() if share == 0.0} == set(FAILING)

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

    # reparse from the stored page, with a field the crawl did not have: the page is
    # read again (the new field's value is only there), every value as the crawl read
    # it, every failure counted again
    spec_file.write_text(
        spec_file.read_text(encoding="utf-8") + '      said: {css: ".amount::text"}\n',
        encoding="utf-8",
    )
    r = run_cli("reparse", spec, "--workspace", str(ws), "-q", "--processes", "1", "--all")
    assert r.returncode == 0, r.stderr[-3000:]
    [reparsed] = workspace_items(ws).values()
    assert reparsed == {**crawled, "said": "N/A"}
    [again] = [e for e in events(ws) if e["event"] == "reparse_finished"]
    counts = again["counts"]
    assert (counts["pages"], counts["narrow"], counts["unchanged_kind"]) == (1, 0, 0), counts
    assert counts["type_failed"] == len(FAILING), counts
    assert "carried" not in again
    assert _failed(again["type_failed"]) == dict.fromkeys(FAILING, 1)
    assert f"{len(FAILING)} values failed their type" in r.stderr, r.stderr[-3000:]


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


JOB_LANGUAGES = """name: langs
source_type: langs
start_urls: ["http://127.0.0.1:9/"]
languages: {languages}
detail:
  id: {{css: ".id::text"}}
  fields:
    filed: {{css: ".f::text", type: date}}
    seen: {{css: ".s::text", type: datetime}}
    fixed: {{css: ".x::text", type: date, date_order: DMY}}
    formatted: {{css: ".y::text", type: date, format: "%d/%m/%Y"}}
    own: {{css: ".o::text", type: date, languages: [id]}}
"""


def _at(spec: Path, key: str, value: str) -> str:
    """``line:col`` (1-based) of ``value`` on the line of ``key`` in ``spec``."""
    for n, line in enumerate(spec.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith(key):
            return f"{n}:{line.index(value) + 1}"
    raise AssertionError(f"no {key} in {spec}")


@pytest.mark.process
@pytest.mark.parametrize(
    ("languages", "said"),
    [("[id, en]", "id DMY, en MDY"), ("[en, fr]", "en MDY, fr DMY")],
)
def test_validate_asks_a_date_order_of_job_languages_that_disagree(
    tmp_path: Path, languages: str, said: str
) -> None:
    """Job-level languages that write numeric dates in different orders: each date
    field that declares no order of its own (nor a format, nor agreeing languages of
    its own) is refused where its type is written."""
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_LANGUAGES.format(languages=languages), encoding="utf-8")
    r = run_cli("validate", str(spec))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith(str(spec))]
    where = {line.split(": ", 1)[0].removeprefix(f"{spec}:"): line for line in lines}
    # at the type of `filed` and of `seen`; `fixed`, `formatted` and `own` say an order
    assert set(where) == {_at(spec, "filed:", "date}"), _at(spec, "seen:", "datetime}")}, lines
    for line in where.values():
        assert f"the languages write numeric dates in different orders ({said})" in line
        assert "date_order" in line
    # one order for all of them, and the spec is valid
    spec.write_text(
        JOB_LANGUAGES.format(languages=languages)
        .replace("type: date}", "type: date, date_order: MDY}")
        .replace("type: datetime}", "type: datetime, date_order: DMY}"),
        encoding="utf-8",
    )
    r = run_cli("validate", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr
