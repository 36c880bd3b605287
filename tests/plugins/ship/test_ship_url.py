"""Shipped items carry the page they came from as a top-level ``url`` beside ``data``,
outside ``content_hash``: against the real reference ingest server, from workspaces
written through the store and from a real crawl (detail pages with a sub-tab)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from framework_ship.run import ShipOptions, Shipper, ShipSummary

from framework.workspace import ItemWrite, NewRow, Outcome, Workspace
from tests.crawl.test_crawl_hostile import _write_spec as write_spec
from tests.fixtures.hostile import HostileServer
from tests.fixtures.ingest import IngestServer
from tests.fixtures.ship import FakeTime


def ship(ws: Workspace, url: str, **options: Any) -> ShipSummary:
    fake = FakeTime()
    return Shipper(
        ws,
        ShipOptions(endpoint=url, **options),
        None,
        echo=lambda line: None,
        notice=lambda line: None,
        sleep=fake.sleep,
        clock=fake.clock,
    ).run()


def write(ws: Workspace, url: str, items: dict[str, dict[str, Any]]) -> None:
    (row,) = ws.store.seed([NewRow("detail", url)])
    writes = [ItemWrite(f"test:{sid}", "test", sid, data) for sid, data in items.items()]
    ws.store.commit(Outcome(row.id, ok=True, items=writes))


def urls(server: IngestServer) -> dict[str, str | None]:
    return {r["dedupe_key"]: r["url"] for r in server.rows()}


@pytest.mark.parametrize("batch_size", [1, 50])
def test_the_page_url_ships_beside_data_and_a_moved_page_does_not_reship(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer, batch_size: int
) -> None:
    ws = make_ship_workspace(0)
    write(ws, "https://site.test/cases/1?token=abc&page=1", {"1": {"title": "one"}})
    write(ws, "https://site.test/cases/2", {"2": {"title": "two"}})
    first = ship(ws, ingest_server.url, batch_size=batch_size)
    assert (first.counts["accepted"], first.exit_code) == (2, 0)
    assert urls(ingest_server) == {
        # a secret-looking parameter leaves the workspace masked, as in every log
        "test:1": "https://site.test/cases/1?token=[redacted]&page=1",
        "test:2": "https://site.test/cases/2",
    }
    for row in ingest_server.rows():
        assert "url" not in row["data"]
        # the hash is of the data alone: the page is not part of it
        canonical = json.dumps(row["data"], sort_keys=True, separators=(",", ":"))
        assert row["content_hash"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    # the same record on a page that moved: no new version, nothing sent
    write(ws, "https://site.test/archive/2", {"2": {"title": "two"}})
    sent = len(ws.ship_log_path.read_text().splitlines())
    again = ship(ws, ingest_server.url, batch_size=batch_size)
    assert (again.counts["skipped"], again.counts["updated"]) == (2, 0)
    assert len(ws.ship_log_path.read_text().splitlines()) == sent
    assert urls(ingest_server)["test:2"] == "https://site.test/cases/2"

    # new content from another page: one update, carrying that page
    write(ws, "https://site.test/archive/2?rev=2", {"2": {"title": "two, amended"}})
    third = ship(ws, ingest_server.url, batch_size=batch_size)
    assert (third.counts["updated"], third.counts["skipped"]) == (1, 1)
    assert urls(ingest_server)["test:2"] == "https://site.test/archive/2?rev=2"
    assert ingest_server.row("test:2")["version"] == 2  # type: ignore[index]


def test_an_item_whose_page_row_is_gone_ships_without_url(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer
) -> None:
    ws = make_ship_workspace(0)
    write(ws, "https://site.test/cases/1", {"1": {"title": "one"}})
    ws.store.reset_rows()  # `crawl --fresh`: the item stays, its page row goes
    assert ship(ws, ingest_server.url).counts["accepted"] == 1
    assert urls(ingest_server) == {"test:1": None}


SUBTAB_SPEC = """\
name: hostile
source_type: hostile
start_urls: ["{base}/"]
pages:
  list:
    follow: {{css: "a::attr(href)", to: detail}}
  detail:
    id: {{url: '/case/(\\d+)$'}}
    fields:
      title: "h1::text"
    subtabs:
      notes: {{url: "/case/{{id}}/notes", each: "li", fields: {{note: "::text"}}}}
"""


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_crawled_item_ships_its_detail_pages_url_not_its_tabs_and_reparse_keeps_it(
    hostile_server: Callable[[], HostileServer],
    ingest_server: IngestServer,
    tmp_path: Path,
    crawl_cli: Any,
) -> None:
    site = hostile_server()
    site.route("/", '<html><body><a href="/case/1">1</a> <a href="/case/2">2</a></body></html>')
    for n in (1, 2):
        site.route(f"/case/{n}", f"<html><body><h1>Case {n}</h1></body></html>")
        site.route(f"/case/{n}/notes", f"<ul><li>note {n}</li></ul>")
    spec = write_spec(tmp_path, SUBTAB_SPEC.format(base=site.url))
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    pages = {f"hostile:{n}": f"{site.url}/case/{n}" for n in (1, 2)}

    def stored() -> dict[str, tuple[str | None, str, Any]]:
        with Workspace.open(ws, create=False, readonly=True) as w:
            return {i.dedupe_key: (i.url, i.content_hash, i.data) for i in w.store.iter_items()}

    before = stored()
    assert {k: v[0] for k, v in before.items()} == pages  # the detail page, not the tab
    assert before["hostile:1"][2] == {"title": "Case 1", "notes": [{"note": "note 1"}]}

    # a reparse re-reads every stored page (the tabs too): same items, same pages
    r = crawl_cli("reparse", str(spec), "--workspace", str(ws), "--all")
    assert r.returncode == 0, r.stderr[-2000:]
    assert stored() == before

    r = crawl_cli("ship", "hostile", "--workspace", str(ws), "--endpoint", ingest_server.url)
    assert r.returncode == 0, r.stderr[-2000:]
    assert urls(ingest_server) == pages
    out = tmp_path / "items.jsonl"
    r = crawl_cli("export", "hostile", "--workspace", str(ws), "-o", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    exported = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert {i["dedupe_key"]: i["url"] for i in exported} == pages
