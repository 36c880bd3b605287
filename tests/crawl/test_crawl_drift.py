"""Selector drift (issue 12 item 3): a fallback selector that won, and a fill rate that
fell below the previous crawl's, are `drift` events naming the field, the selectors and
example URLs; the run's run_finished and `framework status` show them."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.crawl.drift import Drift
from framework.demo.redesign import ChangingSite
from tests.fixtures.crawl import events, workspace_items

EXIT_OK = 0


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, name: str, **data: Any) -> None:
        self.events.append({"event": name, **data})


def _drift(rec: Recorder, before: dict[str, Any] | None = None) -> Drift:
    d = Drift(rec, logging.getLogger("test.drift"), fill_drop=0.25, min_records=4)
    d.previous_fill(before or {})
    return d


def test_a_fallback_is_said_once_and_counted_with_examples() -> None:
    rec = Recorder()
    d = _drift(rec)
    for i in range(5):
        d.fallback("detail", "amount", "css: .amount::text", "css: [data-field]", f"u{i}")
    assert rec.events == [
        {
            "event": "drift",
            "reason": "fallback",
            "kind": "detail",
            "field": "amount",
            "selectors": ["css: .amount::text", "css: [data-field]"],
            "examples": ["u0"],
        }
    ]
    (summary,) = d.finish({}, lambda k, f: [])
    assert summary["count"] == 5
    assert summary["examples"] == ["u0", "u1", "u2"]


@pytest.mark.parametrize(
    ("before", "now", "drifted"),
    [
        (10, 6, True),  # 100% -> 60%: 40 points down
        (10, 8, False),  # 20 points: under the 25% threshold
        (8, 5, True),  # 80% -> 50%: 30 points
        (10, 10, False),
    ],
)
def test_fill_rate_drift_past_the_threshold(before: int, now: int, drifted: bool) -> None:
    rec = Recorder()
    d = _drift(rec, {"detail": {"records": 10, "fields": {"room": before}}})
    assert d.watching("detail")
    assert not d.watching("list")
    for i in range(10):
        d.record("detail", f"u{i}", {"room": "A" if i < now else None})
    got = d.finish({"detail": {"records": 10, "fields": {"room": now}}}, lambda k, f: ["css: r"])
    if not drifted:
        assert got == []
        assert rec.events == []
        return
    (entry,) = got
    assert entry == {
        "reason": "fill_rate",
        "kind": "detail",
        "field": "room",
        "selectors": ["css: r"],
        "before": before / 10,
        "now": now / 10,
        "examples": [f"u{i}" for i in range(now, min(now + 3, 10))],
    }
    assert rec.events == [{"event": "drift", **entry}]


def test_small_runs_are_not_judged() -> None:
    rec = Recorder()
    d = _drift(rec, {"detail": {"records": 3, "fields": {"room": 3}}})  # under min_records
    assert d.finish({"detail": {"records": 10, "fields": {"room": 0}}}, lambda k, f: []) == []


# ------------------------------------------------------------ real crawls


@pytest.fixture
def changing_site() -> Iterator[ChangingSite]:
    site = ChangingSite(edge_cases=False).start()
    try:
        yield site
    finally:
        site.stop()


def _crawl(crawl_cli, spec: Path, ws: Path) -> None:
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]


@pytest.mark.process
def test_fallback_recovered_records_are_stored_with_a_drift_event(
    changing_site: ChangingSite, good_spec, tmp_path: Path, crawl_cli
) -> None:
    site = changing_site
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    _crawl(crawl_cli, spec, ws)
    variant = [c for c in site.data.good if c.amount_variant]  # `.amount` gone on these
    assert variant
    items = workspace_items(ws)
    for case in variant:  # recovered by `[data-field=amount]`, stored
        assert items[f"sipp-demo:{case.id}"]["amount"] == case.amount
    (said,) = [e for e in events(ws) if e["event"] == "drift"]
    assert said["reason"] == "fallback"
    assert said["field"] == "amount"
    assert said["selectors"] == ["css: .amount::text", "css: [data-field=amount]::text"]
    assert said["examples"][0].endswith(tuple(f"/cases/{c.id}" for c in variant))
    (summary,) = events(ws)[-1]["drift"]
    assert summary["count"] == len(variant)
    st = crawl_cli("status", "fixture-cases", "--workspace", str(ws), cwd=tmp_path)
    assert "drift: detail.amount matched fallback 'css: [data-field=amount]::text'" in st.stdout
    report = json.loads(
        crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json", cwd=tmp_path).stdout
    )
    assert [d["field"] for d in report["drift"]] == ["amount"]


@pytest.mark.process
def test_a_field_missing_on_40_percent_of_pages_is_fill_rate_drift(
    changing_site: ChangingSite, good_spec, tmp_path: Path, crawl_cli
) -> None:
    site = changing_site
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    _crawl(crawl_cli, spec, ws)
    good = site.data.good
    gone = [c.id for c in good[: int(len(good) * 0.4)]]
    site.change(remove=dict.fromkeys(gone, "room"))
    r = crawl_cli(
        "requeue", "fixture-cases", "--kind", "detail", "--workspace", str(ws), cwd=tmp_path
    )
    assert r.returncode == EXIT_OK, r.stderr
    _crawl(crawl_cli, spec, ws)
    drift = [e for e in events(ws) if e["event"] == "drift" and e["reason"] == "fill_rate"]
    (entry,) = drift
    assert entry["field"] == "room"
    assert entry["selectors"] == ["css: .room::text"]
    assert entry["before"] - entry["now"] > 0.25
    assert len(entry["examples"]) == 3
    st = crawl_cli("status", "fixture-cases", "--workspace", str(ws), cwd=tmp_path)
    assert "drift: detail.room filled" in st.stdout


@pytest.mark.process
def test_halt_on_drift_stops_before_storing_a_drifted_page(
    changing_site: ChangingSite, good_spec, tmp_path: Path, crawl_cli
) -> None:
    site = changing_site
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q", "--halt-on-drift")
    assert r.returncode == 4, r.stderr[-3000:]
    assert "a field matched only a fallback selector (--halt-on-drift)" in r.stderr
    variant = {f"sipp-demo:{c.id}" for c in site.data.good if c.amount_variant}
    assert variant
    assert not variant & set(workspace_items(ws))  # no drifted record stored
    assert [e["field"] for e in events(ws) if e["event"] == "drift"] == ["amount"]
    assert events(ws)[-1]["reason"] == "drift"
    # without the flag the crawl resumes: the drifted pages were left pending
    _crawl(crawl_cli, spec, ws)
    assert variant <= set(workspace_items(ws))
