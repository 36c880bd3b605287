"""`framework ship --prune`: the ship log compacted to one success line per key and
version plus the latest line of every key not delivered since, atomically, under the
shipper lock; a run after pruning ships, skips and holds exactly what it would have."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from framework_ship.index import ShipIndex
from framework_ship.policy import RetryPolicy
from framework_ship.prune import PRUNE_PREFIX
from framework_ship.run import ShipOptions, Shipper, ShipSummary

from framework.cli import main
from framework.errors import FrameworkError
from framework.workspace import Workspace
from tests.fixtures.ship import FakeTime, Fault, FaultEndpoint, item_data, put_items

POLICY = RetryPolicy(max_attempts=3, initial_wait=1, jitter=0, retry_after_cap=300)


def ship(ws: Workspace, endpoint: FaultEndpoint, **options: Any) -> ShipSummary:
    options.setdefault("batch_size", 1)
    fake = FakeTime()
    shipper = Shipper(
        ws,
        ShipOptions(endpoint=endpoint.url, policy=POLICY, **options),
        echo=lambda line: None,
        notice=lambda line: None,
        sleep=fake.sleep,
        clock=fake.clock,
    )
    try:
        return shipper.run()
    except FrameworkError:  # a rejection (4) or an error left (3): the log is what counts
        assert shipper.summary is not None
        return shipper.summary


def decisions(ws: Workspace) -> list[str]:
    lines: list[str] = []
    Shipper(ws, ShipOptions(endpoint="http://127.0.0.1:9", dry_run=True), echo=lines.append).run()
    return lines


def index_state(ws: Workspace) -> dict[str, tuple[bytes, str, bytes | None]]:
    """What the index rebuilt from the log alone says of every key."""
    keys = [i.dedupe_key for i in ws.store.iter_items()]
    index = ShipIndex._from_log(ws.ship_log_path)
    try:
        found = index.lookup_many(keys)
    finally:
        index.close()
    return {k: (v.hash, v.outcome, v.ok_hash) for k, v in found.items()}


def records(ws: Workspace) -> list[dict[str, Any]]:
    out = []
    for raw in ws.ship_log_path.read_bytes().split(b"\n"):
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


@pytest.fixture
def history(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> Workspace:
    """A workspace whose log holds every kind of history a key can have."""
    ws = make_ship_workspace(9)
    ep = fault_endpoint

    def one(key: int, *faults: Fault) -> None:
        ep.script("/v1/items", *faults)
        ship(ws, ep, only=[f"test:{key:06d}"])

    one(0, Fault(status=500))  # a failure, then accepted
    one(1, Fault(status=422, body={"detail": "bad"}))  # rejected: held
    one(2, *[Fault(status=503)] * 3)  # retries ran out: ships next run
    ship(ws, ep, batch_size=4, only=[f"test:{i:06d}" for i in range(3, 9)])  # accepted
    put_items(ws, {f"{i:06d}": item_data(i, version=2) for i in (3, 4, 5, 6, 7)})
    one(5, Fault(status=422, body={"detail": "v2 bad"}))  # v1 delivered, v2 rejected
    for key in (3, 4, 6):
        one(key)  # updated
    one(7, *[Fault(status=500)] * 3)  # v1 delivered, v2 failing for now
    put_items(ws, {"000006": item_data(6, version=1)})
    one(6)  # back to v1: a second success line of version v1
    # A torn tail from a kill mid-write.
    with ws.ship_log_path.open("ab") as fh:
        fh.write(b'{"v":1,"dedupe_key":"test:000008","outco')
    return ws


def test_prune_keeps_every_decision_and_one_success_per_key_and_version(
    history: Workspace,
    fault_endpoint: FaultEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = history
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path / "home"))
    before = records(ws)
    before_decisions = decisions(ws)
    before_state = index_state(ws)
    last_run = ShipIndex.open(ws.path, ws.ship_log_path, readonly=True).last_run()
    # The fixture's history has what pruning must drop: retried failures, repeats.
    pairs = Counter(
        (r["dedupe_key"], r["content_hash"])
        for r in before
        if r["outcome"] in ("accepted", "updated", "duplicate")
    )
    assert max(pairs.values()) >= 2
    stale = ws.path / f"{PRUNE_PREFIX}crashed"
    stale.write_bytes(b"half a pruned log")  # left by a prune killed before its rename

    assert main(["ship", "job", "--workspace", str(ws.path), "--prune", "--dry-run"]) == 0
    assert len(records(ws)) == len(before)  # a dry run writes nothing
    ws.ship_log_path.chmod(0o640)
    assert main(["ship", "job", "--workspace", str(ws.path), "--prune"]) == 0
    out = capsys.readouterr().out
    after = records(ws)
    assert ws.ship_log_path.stat().st_mode & 0o7777 == 0o640  # its permissions kept
    assert f"from {len(before)} to {len(after)} lines" in out
    assert not stale.exists()

    # One success line per key and version, in the log's order; failures only as the
    # latest line of a key not delivered since.
    successes = [
        (r["dedupe_key"], r["content_hash"])
        for r in after
        if r["outcome"] in ("accepted", "updated", "duplicate")
    ]
    assert sorted(successes) == sorted(pairs)
    failures = [r for r in after if r["outcome"] not in ("accepted", "updated", "duplicate")]
    assert sorted(r["dedupe_key"] for r in failures) == [
        "test:000001",
        "test:000002",
        "test:000005",
        "test:000007",
    ]
    assert all(r in before for r in after)
    assert [before.index(r) for r in after] == sorted(before.index(r) for r in after)
    assert ws.ship_log_path.read_bytes().endswith(b"\n")  # the torn tail is gone

    # Every decision is the same, from the log alone and through the rebuilt index.
    assert index_state(ws) == before_state
    assert decisions(ws) == before_decisions
    assert ShipIndex.open(ws.path, ws.ship_log_path, readonly=True).last_run() == last_run
    pruned = [e for e in ws.events if e["event"] == "ship_pruned"]
    assert len(pruned) == 1
    assert pruned[0]["lines_after"] == len(after)

    # A run after pruning sends exactly the keys the decisions said, skips the rest.
    to_ship = sorted(line.split()[1] for line in before_decisions if line.startswith("ship "))
    held = [line for line in before_decisions if line.startswith("hold ")]
    skipped = [line for line in before_decisions if line.startswith("skip ")]
    assert to_ship == ["test:000002", "test:000007"]
    assert len(held) == 2
    sent_before = len(fault_endpoint.requests)
    summary = ship(ws, fault_endpoint)
    sent = sorted(r.body["dedupe_key"] for r in fault_endpoint.requests[sent_before:])
    assert sent == to_ship
    assert summary.counts["skipped"] == len(skipped)
    assert summary.held == len(held)
    # And pruning again, after that run, changes no decision either.
    settled = decisions(ws)
    assert main(["ship", "job", "--workspace", str(ws.path), "--prune"]) == 0
    assert decisions(ws) == settled
    assert ship(ws, fault_endpoint).counts["skipped"] == 7


def test_prune_waits_for_no_shipper_it_refuses_while_one_runs(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path / "home"))
    ws = make_ship_workspace(2)
    ship(ws, fault_endpoint)
    log = ws.ship_log_path.read_bytes()
    with ws.lock("ship"):
        assert main(["ship", "job", "--workspace", str(ws.path), "--prune"]) == 3
    assert ws.ship_log_path.read_bytes() == log
    # Nothing to drop: the same lines, and nothing ever shipped is fine too.
    assert main(["ship", "job", "--workspace", str(ws.path), "--prune"]) == 0
    assert ws.ship_log_path.read_bytes() == log
    empty = make_ship_workspace(1, name="empty")
    assert main(["ship", "job", "--workspace", str(empty.path), "--prune"]) == 0
    assert not empty.ship_log_path.exists()
