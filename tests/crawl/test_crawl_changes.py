"""Change limits on a re-crawl (issue 12 item 2): max_change, frozen, a vanished value;
the candidate is held as review_required while the accepted version stays the item;
`framework review` lists, accepts and rejects, every decision in the event log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.crawl.changes import ChangeLimits
from framework.demo.redesign import ChangingSite
from framework.spec.models import FieldSpec
from framework.workspace import Workspace
from tests.fixtures.crawl import events, item_hashes, workspace_items

EXIT_OK, EXIT_USAGE, EXIT_HALTED = 0, 2, 4


def limits(**fields: dict[str, Any]) -> ChangeLimits:
    return ChangeLimits({n: FieldSpec.model_validate({"css": "p", **f}) for n, f in fields.items()})


# (field spec, old value, new value, the rule broken or None)
CASES: list[tuple[dict[str, Any], Any, Any, str | None]] = [
    ({"type": "number", "max_change": "50%"}, 100, 150, None),
    ({"type": "number", "max_change": "50%"}, 100, 151, "max_change"),
    ({"type": "number", "max_change": "50%"}, 100, 49, "max_change"),
    ({"type": "number", "max_change": "50%"}, 100, 900, "max_change"),
    ({"type": "number", "max_change": "50%"}, 0, 1, "max_change"),  # from zero: any change
    ({"type": "number", "max_change": "50%"}, 0, 0, None),
    ({"type": "number", "max_change": 10}, 100, 110, None),  # an absolute amount
    ({"type": "number", "max_change": 10}, 100, 111, "max_change"),
    (
        {"type": "price", "max_change": "10%"},
        {"amount": 10, "currency": "$"},
        {"amount": 12, "currency": "$"},
        "max_change",
    ),
    ({"type": "number", "max_change": "50%"}, 100, None, "vanished"),  # a value disappears
    ({"type": "number", "max_change": "50%"}, None, 100, None),  # one appears: no change
    ({"frozen": True}, "PN Jakarta", "PN Jakarta", None),
    ({"frozen": True}, "PN Jakarta", "PN Bandung", "frozen"),
    ({"frozen": True}, "PN Jakarta", "", "vanished"),
    ({"frozen": True}, ["a"], [], "vanished"),
    ({}, "x", "y", None),  # no limit, no check
]


@pytest.mark.parametrize(("spec", "old", "new", "rule"), CASES)
def test_each_limit(spec: dict[str, Any], old: Any, new: Any, rule: str | None) -> None:
    got = limits(f=spec).breaches({"f": old}, {"f": new})
    assert got == ([] if rule is None else [{"rule": rule, "field": "f", "value": new, "was": old}])


def test_no_limits_is_false_and_max_change_needs_a_number() -> None:
    assert not limits(a={}, b={"type": "number"})
    assert limits(a={"frozen": True})
    with pytest.raises(ValueError, match="percentage"):
        FieldSpec.model_validate({"css": "p", "max_change": "half"})


# ------------------------------------------------------------ a real re-crawl


@pytest.fixture
def changing_site() -> Iterator[ChangingSite]:
    site = ChangingSite(edge_cases=False).start()
    try:
        yield site
    finally:
        site.stop()


def _crawl(crawl_cli, spec: Path, ws: Path, code: int = 0) -> None:
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == code, r.stderr[-3000:]


@pytest.mark.process
def test_a_recrawl_quarantines_changes_over_a_limit_until_reviewed(
    changing_site: ChangingSite, good_spec, tmp_path: Path, crawl_cli, fault_endpoint
) -> None:
    site = changing_site
    spec = good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    text = text.replace("      min: 0\n", "      min: 0\n      max_change: 50%\n")
    text = text.replace('    room: ".room::text"', '    room: {css: ".room::text", frozen: true}')
    assert "max_change: 50%" in text
    assert "frozen: true" in text
    spec.write_text(text, encoding="utf-8")
    ws = tmp_path / "ws"
    _crawl(crawl_cli, spec, ws)
    first = workspace_items(ws)
    hashes = item_hashes(ws)
    cases = [c for c in site.data.good if c.room is not None]
    jumped, lost = cases[0], cases[1]
    jumped_key, lost_key = f"sipp-demo:{jumped.id}", f"sipp-demo:{lost.id}"

    site.change(amount_factor={jumped.id: 9}, remove={lost.id: "room"})
    r = crawl_cli(
        "requeue", "fixture-cases", "--kind", "detail", "--workspace", str(ws), cwd=tmp_path
    )
    assert r.returncode == EXIT_OK, r.stderr
    _crawl(crawl_cli, spec, ws, EXIT_HALTED)  # records held: a human must look

    # the accepted versions stay the items (and ship unchanged); nothing else moved
    assert workspace_items(ws) == first
    assert item_hashes(ws) == hashes
    with Workspace.open(ws, create=False, readonly=True) as w:
        held = {h.dedupe_key: h for h in w.store.iter_holds()}
    assert set(held) == {jumped_key, lost_key}
    assert held[jumped_key].status == "review_required"
    assert held[jumped_key].reasons == [
        {"rule": "max_change", "field": "amount", "value": jumped.amount * 9, "was": jumped.amount}
    ]
    assert held[lost_key].reasons == [
        {"rule": "vanished", "field": "room", "value": None, "was": lost.room}
    ]
    said = {e["key"] for e in events(ws) if e["event"] == "item_review_required"}
    assert said == {jumped_key, lost_key}
    assert events(ws)[-1]["counts"]["items_review"] == 2

    st = crawl_cli("status", "fixture-cases", "--workspace", str(ws), cwd=tmp_path)
    assert "held back (never shipped): 2 review_required" in st.stdout

    def ship() -> dict[str, str]:
        r = crawl_cli(
            "ship",
            "fixture-cases",
            "--workspace",
            str(ws),
            "--endpoint",
            fault_endpoint.url,
            cwd=tmp_path,
        )
        assert r.returncode == EXIT_OK, r.stderr[-3000:]
        shipped_stderr.append(r.stderr)
        return dict(fault_endpoint.rows)

    shipped_stderr: list[str] = []
    # ship sends the accepted versions only: the held candidates never leave, and it
    # says so rather than only "drained"
    assert ship() == {k: h for k, (h, complete) in hashes.items() if complete}
    assert (
        "2 records held back by the crawl, never shipped (review_required 2): "
        "`framework status` counts them by rule, `framework review` decides the "
        "review_required ones"
    ) in shipped_stderr[-1]

    listed = crawl_cli("review", "fixture-cases", "--workspace", str(ws), cwd=tmp_path)
    assert listed.returncode == EXIT_OK, listed.stderr
    out = listed.stdout
    assert f"{jumped_key}  (amount max_change;" in out
    assert f"  amount: {json.dumps(jumped.amount)} -> {json.dumps(jumped.amount * 9)}" in out
    assert f'  room: "{lost.room}" -> null' in out
    as_json = json.loads(
        crawl_cli("review", "fixture-cases", "--workspace", str(ws), "--json", cwd=tmp_path).stdout
    )
    assert [h["key"] for h in as_json] == sorted([jumped_key, lost_key])

    bad = crawl_cli(
        "review", "fixture-cases", "accept", "sipp-demo:nope", "--workspace", str(ws), cwd=tmp_path
    )
    assert bad.returncode == EXIT_USAGE
    assert "not held for review: sipp-demo:nope" in bad.stderr

    ok = crawl_cli(
        "review", "fixture-cases", "accept", jumped_key, "--workspace", str(ws), cwd=tmp_path
    )
    assert ok.returncode == EXIT_OK, ok.stderr
    no = crawl_cli(
        "review", "fixture-cases", "reject", lost_key, "--workspace", str(ws), cwd=tmp_path
    )
    assert no.returncode == EXIT_OK, no.stderr

    after = workspace_items(ws)
    assert after[jumped_key]["amount"] == jumped.amount * 9  # accepted: the item, it ships
    assert after[jumped_key]["rulings"] == first[jumped_key]["rulings"]  # sub-tab data kept
    assert item_hashes(ws)[jumped_key] != hashes[jumped_key]
    shipped = ship()  # accepted: it ships now; the rejected one stays as shipped before
    assert shipped[jumped_key] == item_hashes(ws)[jumped_key][0]
    assert shipped[lost_key] == hashes[lost_key][0]
    assert after[lost_key] == first[lost_key]  # rejected: the accepted version stays
    with Workspace.open(ws, create=False, readonly=True) as w:
        assert list(w.store.iter_holds()) == []
    decisions = [(e["event"], e["key"]) for e in events(ws) if e["event"].startswith("review_")]
    assert decisions == [("review_accepted", jumped_key), ("review_rejected", lost_key)]
    again = crawl_cli("review", "fixture-cases", "--workspace", str(ws), cwd=tmp_path)
    assert "nothing held for review" in again.stdout


@pytest.mark.process
def test_a_redesigned_site_is_recovered_reported_and_quarantined(
    changing_site: ChangingSite, good_spec, tmp_path: Path, crawl_cli, fault_endpoint
) -> None:
    """The acceptance of issue 12: ids changed (data-field kept), one price times 9, one
    value removed. Records recovered by fallback selectors are stored and a drift event
    names the field; the price jump is quarantined and not shipped; the removed value
    breaks its limit; review lists it."""
    site = changing_site
    spec = good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    text = text.replace(
        '  id: {css: "#case-number::text", required: true}',
        '  id: {css: ["#case-number::text", "[data-field=case-number]::text"], required: true}',
    )
    text = text.replace("      min: 0\n", "      min: 0\n      max_change: 50%\n")
    text = text.replace('    room: ".room::text"', '    room: {css: ".room::text", frozen: true}')
    assert "data-field=case-number" in text
    spec.write_text(text, encoding="utf-8")
    ws = tmp_path / "ws"
    _crawl(crawl_cli, spec, ws)
    first = workspace_items(ws)
    cases = [c for c in site.data.good if c.room is not None and not c.amount_variant]
    jumped, lost = cases[0], cases[1]
    jumped_key, lost_key = f"sipp-demo:{jumped.id}", f"sipp-demo:{lost.id}"

    site.change(amount_factor={jumped.id: 9}, remove={lost.id: "room"}, redesign=True)
    r = crawl_cli(
        "requeue", "fixture-cases", "--kind", "detail", "--workspace", str(ws), cwd=tmp_path
    )
    assert r.returncode == EXIT_OK, r.stderr
    _crawl(crawl_cli, spec, ws, EXIT_HALTED)  # records held: a human must look

    # every record recovered through data-field: stored as before (nothing lost)
    assert workspace_items(ws) == first
    finished = events(ws)[-1]
    drifted = {d["field"]: d for d in finished["drift"] if d["reason"] == "fallback"}
    assert set(drifted) == {"id", "amount"}
    assert drifted["id"]["selectors"] == [
        "css: #case-number::text",
        "css: [data-field=case-number]::text",
    ]
    assert drifted["id"]["count"] == len(site.data.good)
    with Workspace.open(ws, create=False, readonly=True) as w:
        held = {h.dedupe_key: h for h in w.store.iter_holds()}
    assert {k: [r["rule"] for r in h.reasons] for k, h in held.items()} == {
        jumped_key: ["max_change"],
        lost_key: ["vanished"],
    }
    r = crawl_cli(
        "ship",
        "fixture-cases",
        "--workspace",
        str(ws),
        "--endpoint",
        fault_endpoint.url,
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert fault_endpoint.rows[jumped_key] == item_hashes(ws)[jumped_key][0]  # the old one
    listed = crawl_cli("review", "fixture-cases", "--workspace", str(ws), cwd=tmp_path).stdout
    assert f"  amount: {json.dumps(jumped.amount)} -> {json.dumps(jumped.amount * 9)}" in listed
    st = crawl_cli("status", "fixture-cases", "--workspace", str(ws), cwd=tmp_path).stdout
    assert "drift: detail.id matched fallback" in st
