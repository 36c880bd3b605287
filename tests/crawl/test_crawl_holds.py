"""Held records are visible and a crawl that holds some needs attention: `status` lists
the held keys under every rule they break (text and --json), `review` lists the invalid
holds beside the changes, `preview` says `held` exactly when the crawl holds, reparse
counts its holds, --halt-on-drift reports no hold it did not write, the crawl and
`status` both answer exit 4 while a record is held, and a price whose currency changed
is held under its change limit with the currency named."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from framework.workspace import Workspace
from tests.fixtures.crawl import events, run_cli, workspace_items
from tests.fixtures.server import QuietHandler, ServedSite

EXIT_OK, EXIT_HALTED = 0, 4
JOB = "holds"

SPEC = """\
name: holds
source_type: holds
start_urls: ["{base}/list"]
list:
  follow: "a.item::attr(href)"
detail:
  id: {{css: "#id::text", required: true}}
  required_any: [[phone, email]]
  fields:
    title: "h1::text"
    phone: ".phone::text"
    email: ".email::text"
    court: {{css: ".court::text", expected: "PN Jakarta"}}
    price: {{css: [".price::text", ".cost::text"], type: number, max: 100, max_change: 50%}}
"""


class Shop(ServedSite):
    """A list of items; each item's page shows what ``items[id]`` says (changeable)."""

    def __init__(self, items: dict[int, dict[str, Any]]) -> None:
        self.items = items
        self._lock = threading.Lock()

    def set(self, i: int, **values: Any) -> None:
        with self._lock:
            self.items[i] = {**self.items[i], **values}

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                with site._lock:
                    body, code = site._page(self.path)
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _page(self, path: str) -> tuple[str, int]:
        if path == "/list":
            links = "".join(f'<a class="item" href="/item/{i}">{i}</a>' for i in self.items)
            return f"<html><body>{links}</body></html>", 200
        tail = path.removeprefix("/item/")
        if not tail.isdigit() or int(tail) not in self.items:
            return "not here", 404
        i = int(tail)
        spans = "".join(
            f'<span class="{name}">{value}</span>' for name, value in self.items[i].items()
        )
        return f'<html><body><h1>Item {i}</h1><span id="id">{i}</span>{spans}</body></html>', 200


GOOD = {"phone": "555", "court": "PN Jakarta", "price": 10}


@pytest.fixture
def shop() -> Iterator[Shop]:
    site = Shop({1: dict(GOOD), 2: dict(GOOD), 3: dict(GOOD)}).start()
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture
def project(shop: Shop, tmp_path: Path) -> Path:
    spec = tmp_path / "projects" / JOB / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC.format(base=shop.url), encoding="utf-8")
    return tmp_path


def cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=project)


def crawl(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(project, "crawl", JOB, "-q", *args)


def status(project: Path) -> tuple[dict[str, Any], str]:
    as_json = cli(project, "status", JOB, "--json")
    assert as_json.returncode == EXIT_OK, as_json.stderr[-2000:]
    text = cli(project, "status", JOB)
    assert text.returncode == EXIT_OK, text.stderr[-2000:]
    return json.loads(as_json.stdout), text.stdout


def holds(project: Path) -> dict[str, tuple[str, list[str]]]:
    with Workspace.open(project / "var" / JOB, create=False, readonly=True) as ws:
        return {
            h.dedupe_key: (h.status, [r["rule"] for r in h.reasons]) for h in ws.store.iter_holds()
        }


@pytest.mark.process
def test_invalid_holds_are_listed_by_every_rule_and_the_crawl_needs_attention(
    shop: Shop, project: Path
) -> None:
    # 2 breaks two rules (no phone nor email; no court at all), 3 one (price over max)
    shop.items[2] = {"price": 20}
    shop.set(3, price=500)
    r = crawl(project)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "holds 2 records back, never shipped (2 invalid)" in r.stderr
    assert f"`framework status {JOB}` lists them by rule" in r.stderr
    assert holds(project) == {
        "holds:2": ("invalid", ["expected", "required_any"]),
        "holds:3": ("invalid", ["max"]),
    }
    assert events(project / "var" / JOB)[-1]["exit_code"] == EXIT_HALTED

    report, text = status(project)
    assert (report["state"], report["exit_code"]) == ("held", EXIT_HALTED)
    held = report["held"]
    assert held["by_status"] == {"invalid": 2}
    # every rule a key breaks, not only its first
    assert held["by_rule"] == {
        "phone|email: required_any": 1,
        "court: expected": 1,
        "price: max": 1,
    }
    assert held["keys"]["by_rule"] == {
        "phone|email: required_any": ["holds:2"],
        "court: expected": ["holds:2"],
        "price: max": ["holds:3"],
    }
    assert "needs attention: 2 records held back, never shipped (exit 4" in text
    assert "done (exit 0)" not in text
    assert "  court: expected (1): holds:2" in text
    assert "  phone|email: required_any (1): holds:2" in text
    assert "  price: max (1): holds:3" in text

    listed = cli(project, "review", JOB)
    assert listed.returncode == EXIT_OK, listed.stderr
    assert "nothing held for review" in listed.stdout
    assert "held as invalid (2:" in listed.stdout
    assert "holds:2  (court expected null; phone|email required_any null;" in listed.stdout
    assert "holds:3  (price max 500; held since" in listed.stdout
    as_json = json.loads(cli(project, "review", JOB, "--json").stdout)
    assert [(h["key"], h["status"]) for h in as_json] == [
        ("holds:2", "invalid"),
        ("holds:3", "invalid"),
    ]

    # reparse reads them again: it counts and says the holds, in its summary and event
    again = cli(project, "reparse", JOB, "--all", "--processes", "1")
    assert "2 records held (2 invalid: see status)" in again.stderr, again.stderr[-3000:]
    assert "; 0 warnings" not in again.stderr
    finished = events(project / "var" / JOB)[-1]
    assert finished["event"] == "reparse_finished"
    assert (finished["counts"]["items_invalid"], finished["counts"]["items_review"]) == (2, 0)

    # the site fixed: the next crawl stores them, drops the holds and is done
    shop.items[2] = dict(GOOD)
    shop.set(3, price=30)
    assert cli(project, "requeue", JOB, "--kind", "detail").returncode == EXIT_OK
    r = crawl(project)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert holds(project) == {}
    report, text = status(project)
    assert (report["state"], report["exit_code"]) == ("done", EXIT_OK)


@pytest.mark.process
def test_preview_says_held_exactly_when_the_crawl_holds(shop: Shop, project: Path) -> None:
    shop.items[2] = {"price": 20}  # required_any and an absent `expected`
    for i, verdict in ((1, "stored"), (2, "held")):
        r = cli(project, "preview", JOB, f"{shop.url}/item/{i}", "--kind", "detail", "--json")
        assert r.returncode == EXIT_OK, r.stderr[-2000:]
        (rec,) = json.loads(r.stdout)["records"]
        assert rec["stored"] is (verdict == "stored")
        assert [h["rule"] for h in rec["held"]] == ([] if i == 1 else ["expected", "required_any"])
        text = cli(project, "preview", JOB, f"{shop.url}/item/{i}", "--kind", "detail").stdout
        if verdict == "stored":
            assert f"record 1 of 1: holds:{i}  (stored)" in text
        else:
            assert (
                "record 1 of 1: holds:2  held (rule court: expected; phone|email: required_any:"
                in text
            )
            assert "(stored)" not in text
    # and the crawl holds that one, and only it
    r = crawl(project)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert holds(project) == {"holds:2": ("invalid", ["expected", "required_any"])}


@pytest.mark.process
def test_a_change_hold_needs_attention_until_reviewed(shop: Shop, project: Path) -> None:
    r = crawl(project)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    shop.set(1, price=90)  # 10 -> 90: over max_change 50%
    assert cli(project, "requeue", JOB, "--kind", "detail").returncode == EXIT_OK
    r = crawl(project)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "(1 review_required)" in r.stderr
    assert f"`framework review {JOB}` accepts or rejects" in r.stderr
    report, text = status(project)
    assert (report["state"], report["exit_code"]) == ("held", EXIT_HALTED)
    assert report["held"]["keys"]["by_rule"] == {"price: max_change": ["holds:1"]}
    assert "  price: max_change (1): holds:1" in text
    # nothing left to fetch, the hold still there: a run again still needs a human
    assert crawl(project).returncode == EXIT_HALTED

    ok = cli(project, "review", JOB, "accept", "holds:1")
    assert ok.returncode == EXIT_OK, ok.stderr
    report, _ = status(project)
    assert (report["state"], report["exit_code"]) == ("done", EXIT_OK)
    assert crawl(project).returncode == EXIT_OK


@pytest.mark.process
def test_halt_on_drift_reports_no_hold_it_did_not_write(shop: Shop, project: Path) -> None:
    r = crawl(project)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    # item 1's price moves to the fallback selector AND jumps over its change limit:
    # the drifted page is not committed, so neither is its hold
    shop.items[1] = {"phone": "555", "court": "PN Jakarta", "cost": 90}
    assert cli(project, "requeue", JOB, "--kind", "detail").returncode == EXIT_OK
    r = cli(project, "crawl", JOB, "--halt-on-drift")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "fallback" in r.stderr
    assert "held for `framework review`" not in r.stderr
    assert holds(project) == {}
    log = events(project / "var" / JOB)
    assert [e for e in log if e["event"] == "item_review_required"] == []
    finished = log[-1]
    assert finished["event"] == "run_finished"
    assert finished["reason"] == "drift"
    assert finished["counts"]["items_review"] == 0


PRICED = """\
name: holds
source_type: holds
start_urls: ["{base}/list"]
list:
  follow: "a.item::attr(href)"
detail:
  id: {{css: "#id::text", required: true}}
  fields:
    title: "h1::text"
    price: {{css: ".price::text", type: price, max_change: 50%}}
"""


@pytest.mark.process
def test_a_change_of_currency_is_held_with_its_reason(tmp_path: Path) -> None:
    """`$10.00` -> `€10.00`: the same amount, no move of 0%, but no longer the same
    price: held under `max_change` as a currency change, named by the crawl, `status`
    and `review`, the accepted `$10.00` still the item."""
    site = Shop({1: {"price": "$10.00"}, 2: {"price": "$20.00"}}).start()
    try:
        spec = tmp_path / "projects" / JOB / "job.yaml"
        spec.parent.mkdir(parents=True)
        spec.write_text(PRICED.format(base=site.url), encoding="utf-8")
        r = crawl(tmp_path)
        assert r.returncode == EXIT_OK, r.stderr[-3000:]
        ten = {"amount": 10, "currency": "$"}
        assert workspace_items(tmp_path / "var" / JOB)["holds:1"]["price"] == ten

        site.set(1, price="\u20ac10.00")
        site.set(2, price="$21.00")  # 5%: within the limit, stored
        assert cli(tmp_path, "requeue", JOB, "--kind", "detail").returncode == EXIT_OK
        r = crawl(tmp_path)
        assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
        assert "holds 1 record back, never shipped (1 review_required)" in r.stderr
        assert "field 'price' currency" in r.stderr
        assert holds(tmp_path) == {"holds:1": ("review_required", ["currency"])}
        items = workspace_items(tmp_path / "var" / JOB)
        assert items["holds:1"]["price"] == ten  # the accepted version still ships
        assert items["holds:2"]["price"] == {"amount": 21, "currency": "$"}
        finished = events(tmp_path / "var" / JOB)[-1]
        assert (finished["event"], finished["exit_code"]) == ("run_finished", EXIT_HALTED)
        assert finished["counts"]["items_review"] == 1

        report, text = status(tmp_path)
        assert (report["state"], report["exit_code"]) == ("held", EXIT_HALTED)
        assert report["held"]["by_status"] == {"review_required": 1}
        assert report["held"]["keys"]["by_rule"] == {"price: currency": ["holds:1"]}
        assert "  price: currency (1): holds:1" in text

        listed = cli(tmp_path, "review", JOB)
        assert listed.returncode == EXIT_OK, listed.stderr
        assert "holds:1  (price currency; held since" in listed.stdout
        assert '{"amount": 10, "currency": "$"} -> {"amount": 10, "currency": "\u20ac"}' in (
            listed.stdout
        )
        [held] = json.loads(cli(tmp_path, "review", JOB, "--json").stdout)
        assert (held["key"], held["status"]) == ("holds:1", "review_required")
        [reason] = held["reasons"]
        assert (reason["rule"], reason["field"]) == ("currency", "price")
        assert reason["reason"] == "the currency changed from '$' to '\u20ac'"
        assert held["candidate"]["price"] == {"amount": 10, "currency": "\u20ac"}
    finally:
        site.stop()
