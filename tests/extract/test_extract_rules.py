"""Field and record rules (issue 12 item 1): pattern, enum, min/max, min_length/max_length,
expected and required_any. A record that breaks one is held as `invalid` with the rule
and value named (framework/workspace/holds.py), never stored as an item (so never
shipped), and shown by `framework status`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from parsel import Selector

from framework.demo.truth import Truth
from framework.errors import SpecError
from framework.extract.fields import FieldExtractor, Scope
from framework.spec import load_spec
from framework.spec.models import FieldSpec
from framework.workspace import ItemWrite, NewRow, Outcome, SqliteStore, Workspace
from framework.workspace.records import HoldWrite
from tests.fixtures.crawl import events, workspace_items

HTML = """
<div class=case>
  <span class=court>PN Jakarta Pusat</span>
  <span class=status>open</span>
  <span class=amount>Rp 1.500.000</span>
  <span class=code>AB-12</span>
  <ul><li class=tag>civil</li><li class=tag>appeal</li></ul>
</div>
"""


def violations(fields: dict[str, Any]) -> list[tuple[str, str, Any]]:
    specs = {name: FieldSpec.model_validate(raw) for name, raw in fields.items()}
    got = FieldExtractor(specs).extract(Scope("http://x.test/", Selector(text=HTML)))
    return got.violations


# (field spec, the violation expected or None) -- every rule, kept and broken
RULES: list[tuple[dict[str, Any], tuple[str, Any] | None]] = [
    ({"css": ".court::text", "pattern": "^PN "}, None),
    ({"css": ".court::text", "pattern": "^PA "}, ("pattern", "PN Jakarta Pusat")),
    ({"css": ".amount::text", "type": "number", "pattern": r"^\d+$"}, None),  # its text
    ({"css": ".status::text", "enum": ["open", "closed"]}, None),
    ({"css": ".status::text", "enum": ["closed"]}, ("enum", "open")),
    ({"css": ".amount::text", "type": "number", "min": 0, "max": 2e6}, None),
    ({"css": ".amount::text", "type": "number", "max": 1000}, ("max", 1500000)),
    ({"css": ".amount::text", "type": "number", "min": 2e6}, ("min", 1500000)),
    ({"css": ".amount::text", "type": "price", "min": 1_000_000}, None),
    # the amount is bounded: 1500000 < 2000001
    (
        {"css": ".amount::text", "type": "price", "min": 2_000_001, "max": 3_000_000},
        ("min", {"amount": 1500000, "currency": "Rp"}),
    ),
    ({"css": ".code::text", "min_length": 5, "max_length": 5}, None),
    ({"css": ".code::text", "min_length": 6}, ("min_length", "AB-12")),
    ({"css": ".code::text", "max_length": 4}, ("max_length", "AB-12")),
    ({"css": ".court::text", "expected": "PN Jakarta Pusat"}, None),
    ({"css": ".court::text", "expected": "PN Bandung"}, ("expected", "PN Jakarta Pusat")),
    ({"css": ".gone::text", "expected": "PN Jakarta Pusat"}, ("expected", None)),  # vanished
    ({"css": ".gone::text", "pattern": "x", "enum": ["y"], "min_length": 3}, None),  # absent
    ({"css": ".tag::text", "many": True, "enum": ["civil", "appeal"]}, None),
    ({"css": ".tag::text", "many": True, "enum": ["civil"]}, ("enum", "appeal")),  # each value
    ({"css": ".tag::text", "many": True, "expected": ["civil", "appeal"]}, None),  # the whole
]


@pytest.mark.parametrize(("spec", "broken"), RULES)
def test_each_rule(spec: dict[str, Any], broken: tuple[str, Any] | None) -> None:
    got = violations({"f": spec})
    assert got == ([] if broken is None else [("f", *broken)])


def test_nested_rows_name_the_row() -> None:
    fields = {"tags": {"each": "li", "fields": {"t": {"css": "::text", "enum": ["civil"]}}}}
    assert violations(fields) == [("tags[1].t", "enum", "appeal")]


def _spec(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: j\nsource_type: s\nstart_urls: [http://x.test/]\n"
        "detail:\n  id: '#id::text'\n" + extra,
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  fields: {a: {css: p, pattern: '(x'}}\n", "invalid regex"),
        ("  fields: {a: {css: p, type: integer, min_length: 2}}\n", "`min_length` on a field"),
        ("  fields: {a: {css: p, min_length: 3, max_length: 2}}\n", "below min_length"),
        ("  fields: {a: {css: p, enum: []}}\n", "`enum`"),
        ("  fields: {a: p}\n  required_any: [a, b]\n", "unknown field 'b'"),
        ("  fields: {a: {css: p, languages: [id]}}\n", "`languages` on a field"),
    ],
)
def test_rules_are_checked_before_any_request(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(_spec(tmp_path, extra))


def test_required_any_accepts_one_group_or_several(tmp_path: Path) -> None:
    one = load_spec(_spec(tmp_path, "  fields: {a: p, b: q}\n  required_any: [a, b]\n"))
    assert one.page_kinds()["detail"].required_any == (("a", "b"),)
    two = load_spec(_spec(tmp_path, "  fields: {a: p, b: q}\n  required_any: [[a], [b, id]]\n"))
    assert two.page_kinds()["detail"].required_any == (("a",), ("b", "id"))


# ------------------------------------------------------------ the store


def _hold(key: str, data: dict[str, Any]) -> HoldWrite:
    reasons = [{"rule": "max", "field": "amount", "value": data["amount"]}]
    return HoldWrite(key, "s", key[2:], data, "invalid", reasons)


def test_a_held_candidate_never_replaces_the_last_good_item(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path / "state.sqlite") as store:
        a, b, c = store.seed([NewRow(kind="detail", url=f"http://x.test/{i}") for i in "abc"])
        assert store.hold_counts() == {"total": 0, "by_status": {}, "by_rule": {}}  # no table
        good = ItemWrite("s:1", "s", "1", {"amount": 10})
        store.commit(Outcome(row_id=a.id, ok=True, items=[good]))
        # the re-crawl's candidate breaks a rule: held, the good version stays the item
        store.commit(Outcome(row_id=b.id, ok=True, holds=[_hold("s:1", {"amount": 900})]))
        assert store.get_item("s:1").data == {"amount": 10}
        (held,) = store.iter_holds()
        assert (held.dedupe_key, held.status, held.has_item) == ("s:1", "invalid", True)
        assert held.data == {"amount": 900}
        assert held.reasons == [{"rule": "max", "field": "amount", "value": 900}]
        assert store.hold_counts() == {
            "total": 1,
            "by_status": {"invalid": 1},
            "by_rule": {"amount: max": 1},
        }
        # valid again: stored as the item, the hold dropped
        store.commit(
            Outcome(row_id=c.id, ok=True, items=[ItemWrite("s:1", "s", "1", {"amount": 11})])
        )
        assert list(store.iter_holds()) == []
        assert store.get_item("s:1").data == {"amount": 11}


# ------------------------------------------------------------ a real crawl


@pytest.mark.process
def test_a_crawl_holds_records_that_break_rules(make_site, good_spec, tmp_path, crawl_cli) -> None:
    site = make_site(edge_cases=False)  # no failing rows: only the holds make it exit 4
    truth = Truth(site.data, site.url)
    records = truth.records()
    amounts = sorted(r["amount"] for r in records.values())
    limit = amounts[len(amounts) // 2]
    spec = good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    text = text.replace("      min: 0\n", f"      min: 0\n      max: {limit}\n")
    text = text.replace("  subtabs:\n", "  required_any: [room]\n  subtabs:\n", 1)
    assert f"max: {limit}" in text
    assert "required_any" in text
    spec.write_text(text, encoding="utf-8")
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-3000:]  # records held: needs attention

    def broken(rec: dict[str, Any]) -> tuple[str, str, Any] | None:
        if rec["amount"] > limit:
            return ("max", "amount", rec["amount"])
        if rec["room"] is None:
            return ("required_any", "room", None)
        return None

    expected = {rec["dedupe_key"]: broken(rec) for rec in records.values() if broken(rec)}
    assert expected
    assert len(expected) < len(records)
    items = workspace_items(ws)
    assert set(items) == set(truth_keys(records)) - set(expected)  # held ones never stored
    with Workspace.open(ws, create=False, readonly=True) as w:
        held = {h.dedupe_key: h for h in w.store.iter_holds()}
        assert set(held) == set(expected)
        for key, (rule, fld, value) in expected.items():
            first = held[key].reasons[0]
            assert (first["rule"], first["field"], first["value"]) == (rule, fld, value)
            assert held[key].status == "invalid"
    said = [e for e in events(ws) if e["event"] == "item_invalid"]
    assert {(e["reasons"][0]["field"], e["reasons"][0]["rule"]) for e in said} == {
        ("amount", "max"),
        ("room", "required_any"),
    }
    assert events(ws)[-1]["counts"]["items_invalid"] == len(expected)

    st = crawl_cli("status", "--workspace", str(ws), "fixture-cases", "--json", cwd=tmp_path)
    report = json.loads(st.stdout)
    assert report["held"]["by_status"] == {"invalid": len(expected)}
    text_out = crawl_cli("status", "--workspace", str(ws), "fixture-cases", cwd=tmp_path).stdout
    assert f"held back (never shipped): {len(expected)} invalid" in text_out
    assert "amount: max" in text_out


def truth_keys(records: dict[str, dict[str, Any]]) -> list[str]:
    return [r["dedupe_key"] for r in records.values()]
