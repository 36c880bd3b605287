"""`framework ship` against the real reference ingest server (uvicorn, port 0)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from framework_ship.run import ShipOptions, Shipper, ShipSummary
from framework_ship.status import status_section

from framework.errors import Checkpoint, Halted
from framework.workspace import ItemWrite, NewRow, Outcome, Workspace
from tests.fixtures.ingest import IngestServer
from tests.fixtures.ship import FakeTime, item_data, put_items


def ship(ws: Workspace, url: str, token: str | None = None, **options: Any) -> ShipSummary:
    fake = FakeTime()
    return Shipper(
        ws,
        ShipOptions(endpoint=url, **options),
        token,
        echo=lambda line: None,
        notice=lambda line: None,
        sleep=fake.sleep,
        clock=fake.clock,
    ).run()


def server_state(server: IngestServer) -> list[tuple[str, str, Any]]:
    return [(r["dedupe_key"], r["content_hash"], r["data"]) for r in server.rows()]


@pytest.mark.parametrize("batch_size", [1, 100])
def test_ship_reship_change_reship(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    batch_size: int,
) -> None:
    ws = make_ship_workspace(250)
    first = ship(ws, ingest_server.url, batch_size=batch_size)
    assert first.counts["accepted"] == 250
    assert first.exit_code == 0
    rows = ingest_server.rows()
    assert len(rows) == 250
    by_key = {r["dedupe_key"]: r for r in rows}
    for item in ws.store.iter_items():
        assert by_key[item.dedupe_key]["content_hash"] == item.content_hash
        assert by_key[item.dedupe_key]["data"] == dict(item.data)
    # one ship-log line per item per attempt, in batch mode too
    lines = [json.loads(x) for x in ws.ship_log_path.read_text().splitlines()]
    assert len(lines) == 250
    assert {x["outcome"] for x in lines} == {"accepted"}
    if batch_size > 1:
        assert len({x["batch_id"] for x in lines}) == 3
        assert {x["route"] for x in lines} == {"/v1/items/batch"}

    before = server_state(ingest_server)
    again = ship(ws, ingest_server.url, batch_size=batch_size)
    assert again.counts["skipped"] == 250
    assert again.counts["accepted"] == 0
    assert server_state(ingest_server) == before
    assert len(ws.ship_log_path.read_text().splitlines()) == 250  # nothing sent

    put_items(ws, {f"{i:06d}": item_data(i, version=2) for i in (3, 77, 201)})
    third = ship(ws, ingest_server.url, batch_size=batch_size)
    assert third.counts["updated"] == 3
    assert third.counts["skipped"] == 247
    for i in (3, 77, 201):
        row = ingest_server.row(f"test:{i:06d}")
        assert row is not None
        assert row["data"]["version"] == 2
        assert len(ingest_server.history(f"test:{i:06d}")) == 1
    assert len(ingest_server.rows()) == 250


def test_dry_run_sends_nothing_to_the_real_server(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer
) -> None:
    ws = make_ship_workspace(5)
    lines: list[str] = []
    Shipper(ws, ShipOptions(endpoint=ingest_server.url, dry_run=True), echo=lines.append).run()
    assert ingest_server.rows() == []
    assert not ws.ship_log_path.exists()
    assert sum(line.startswith("ship ") for line in lines) == 5


def test_a_lost_answer_is_a_duplicate_on_replay(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer
) -> None:
    # The server stored the item but the shipper died before logging: the replay must
    # leave one row and count as a success.
    ws = make_ship_workspace(2)
    ship(ws, ingest_server.url, batch_size=1)
    ws.ship_log_path.unlink()
    (ws.path / "ship-index.sqlite").unlink()
    again = ship(ws, ingest_server.url, batch_size=1)
    assert again.counts["accepted"] + again.counts["duplicate"] == 2
    assert len(ingest_server.rows()) == 2


def test_rejected_by_the_real_server_in_a_batch(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer
) -> None:
    ws = make_ship_workspace(4)
    # A key that is not {source_type}:{source_id}: the reference server answers 422.
    (row,) = ws.store.seed([NewRow(kind="detail", url="http://site.test/odd")])
    ws.store.commit(
        Outcome(
            row_id=row.id,
            ok=True,
            items=[ItemWrite("test:odd", "test", "other", {"title": "x"})],
        )
    )
    shipper = Shipper(
        ws,
        ShipOptions(endpoint=ingest_server.url, batch_size=10),
        echo=lambda line: None,
        notice=lambda line: None,
    )
    # A rejection waits for a human: the run exits 4 (the others are delivered).
    with pytest.raises(Halted, match="1 item rejected"):
        shipper.run()
    summary = shipper.summary
    assert summary is not None
    assert summary.counts["accepted"] == 4
    assert summary.counts["rejected"] == 1
    (bad,) = [
        json.loads(x)
        for x in ws.ship_log_path.read_text().splitlines()
        if json.loads(x)["outcome"] == "rejected"
    ]
    assert bad["dedupe_key"] == "test:odd"
    assert bad["http_status"] == 422
    assert "dedupe_key" in bad["detail"]
    assert len(ingest_server.rows()) == 4


def test_wrong_token_halts(
    make_ship_workspace: Callable[..., Workspace],
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    server = make_ingest_server(token="right-token-123")
    ws = make_ship_workspace(3)
    with pytest.raises(Halted, match="refused the credentials"):
        ship(ws, server.url, token="wrong-token-456", batch_size=1)
    assert server.rows() == []
    summary = ship(ws, server.url, token="right-token-123", batch_size=1)
    assert summary.counts["accepted"] == 3


def test_status_section_reports_latest_outcomes(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer
) -> None:
    ws = make_ship_workspace(6)
    assert status_section(ws) is None
    with pytest.raises(Checkpoint, match="max-items"):
        ship(ws, ingest_server.url, max_items=4, batch_size=2)
    section = status_section(ws)
    assert section is not None
    assert section["latest_outcomes"] == {"accepted": 4}
    assert section["keys_delivered"] == 4
    assert section["complete_items"] == 6
    assert section["last_run"]["exit_code"] == 3
    assert section["shipping_now"] is False
    ship(ws, ingest_server.url)
    section = status_section(ws)
    assert section is not None
    assert section["keys_delivered"] == 6
    assert section["last_run"]["counts"]["skipped"] == 4


@pytest.mark.parametrize("batch_size", [1, 10])
def test_content_that_goes_back_to_an_earlier_version_arrives(
    make_ship_workspace: Callable[..., Workspace], ingest_server: IngestServer, batch_size: int
) -> None:
    # v1 -> v2 -> v1: the returning v1 is a new delivery of a version the server saw
    # under the same Idempotency-Key; it must be stored, not answered from the replay.
    ws = make_ship_workspace(3)
    ship(ws, ingest_server.url, batch_size=batch_size)
    put_items(ws, {"000001": item_data(1, version=2)})
    assert ship(ws, ingest_server.url, batch_size=batch_size).counts["updated"] == 1
    put_items(ws, {"000001": item_data(1, version=1)})
    summary = ship(ws, ingest_server.url, batch_size=batch_size)
    assert summary.counts["updated"] == 1
    row = ingest_server.row("test:000001")
    assert row is not None
    assert row["data"]["version"] == 1
    reused = [
        json.loads(x)
        for x in ws.ship_log_path.read_text().splitlines()
        if json.loads(x)["error_class"] == "idempotency_key_reused"
    ]
    assert [r["dedupe_key"] for r in reused] == ["test:000001"]


def test_a_netrc_entry_cannot_replace_the_bearer_token(
    make_ship_workspace: Callable[..., Workspace],
    make_ingest_server: Callable[..., IngestServer],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # requests applies ~/.netrc to a request without explicit auth, which would send
    # Basic credentials instead of the token: the token must win.
    server = make_ingest_server(token="right-token-123")
    host = server.url.split("://", 1)[1].split(":", 1)[0]
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host} login someone password elsewhere\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    ws = make_ship_workspace(2)
    summary = ship(ws, server.url, token="right-token-123", batch_size=1)
    assert summary.exit_code == 0
    assert len(server.rows()) == 2
