"""`framework ship` against a fault-injecting endpoint: every failure class asserts the
attempts in the ship log, the sleeps requested, the per-item outcome and the exit code."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from framework_ship.deadline import deadline_path, host_of
from framework_ship.policy import RetryPolicy
from framework_ship.run import ShipOptions, Shipper, ShipSummary

from framework.errors import EXIT_CHECKPOINT, EXIT_HALTED, Checkpoint, Halted
from framework.workspace import Workspace
from tests.fixtures.ship import FakeTime, Fault, FaultEndpoint, http_date, item_data, put_items

POLICY = RetryPolicy(max_attempts=4, initial_wait=1, jitter=0, max_wait=60, retry_after_cap=300)


def log_lines(ws: Workspace) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ws.ship_log_path.read_text().splitlines() if line]


def attempts_of(ws: Workspace, key: str) -> list[tuple[int, int | None, str, str | None]]:
    return [
        (r["attempt"], r["http_status"], r["outcome"], r["error_class"])
        for r in log_lines(ws)
        if r["dedupe_key"] == key
    ]


def ship(
    ws: Workspace,
    endpoint: FaultEndpoint,
    fake: FakeTime,
    notices: list[str] | None = None,
    **options: Any,
) -> ShipSummary:
    options.setdefault("batch_size", 1)
    options.setdefault("policy", POLICY)
    shipper = Shipper(
        ws,
        ShipOptions(endpoint=endpoint.url, **options),
        echo=lambda line: None,
        notice=(notices.append if notices is not None else lambda m: None),
        sleep=fake.sleep,
        clock=fake.clock,
    )
    return shipper.run()


def test_500s_are_retried_with_backoff(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(1)
    fake = FakeTime()
    fault_endpoint.script("/v1/items", Fault(status=500), Fault(status=502))
    summary = ship(ws, fault_endpoint, fake)
    assert attempts_of(ws, "test:000000") == [
        (1, 500, "error", "http_5xx"),
        (2, 502, "error", "http_5xx"),
        (3, 201, "accepted", None),
    ]
    assert fake.sleeps == [1, 2]
    assert summary.counts["accepted"] == 1
    assert summary.exit_code == 0


def test_503_with_delta_seconds_retry_after_is_honoured_and_shared(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(1)
    fake = FakeTime()
    start = fake.now
    fault_endpoint.script("/v1/items", Fault(status=503, headers={"Retry-After": "5"}))
    summary = ship(ws, fault_endpoint, fake)
    assert attempts_of(ws, "test:000000") == [
        (1, 503, "error", "http_5xx"),
        (2, 201, "accepted", None),
    ]
    assert fake.sleeps == [5]
    record = json.loads(deadline_path(ws.path, host_of(fault_endpoint.url)).read_text())
    assert record["until"] == start + 5
    assert summary.exit_code == 0


def test_429_with_http_date_retry_after(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(2)
    fake = FakeTime()
    fault_endpoint.script(
        "/v1/items", Fault(status=429, headers={"Retry-After": lambda: http_date(fake.now + 7)})
    )
    summary = ship(ws, fault_endpoint, fake)
    assert attempts_of(ws, "test:000000") == [
        (1, 429, "error", "rate_limited"),
        (2, 201, "accepted", None),
    ]
    assert fake.sleeps == [7]  # the backoff (1 s) is shorter than the demand
    assert summary.counts["accepted"] == 2


def test_retry_after_over_the_cap_is_a_checkpoint_and_binds_the_next_run(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(3)
    fake = FakeTime()
    fault_endpoint.script("/v1/items", Fault(status=429, headers={"Retry-After": "3600"}))
    with pytest.raises(Checkpoint, match="over the cap") as caught:
        ship(ws, fault_endpoint, fake)
    assert caught.value.exit_code == EXIT_CHECKPOINT
    assert attempts_of(ws, "test:000000") == [(1, 429, "error", "rate_limited")]
    assert fake.sleeps == []  # no hour-long sleep
    sent = len(fault_endpoint.requests)
    # The next run (an hour not yet passed) does not even send.
    fake.now += 60
    with pytest.raises(Checkpoint, match="may not be sent"):
        ship(ws, fault_endpoint, fake)
    assert len(fault_endpoint.requests) == sent
    # Under the cap now: it waits out the rest, then ships everything.
    fake.now += 3600 - 60 - 100
    summary = ship(ws, fault_endpoint, fake)
    assert fake.sleeps == [100]
    assert summary.counts["accepted"] == 3


@pytest.mark.parametrize(
    ("fault", "options", "error_class"),
    [
        pytest.param(Fault(kind="reset"), {}, "reset", id="connection-reset"),
        pytest.param(Fault(kind="truncate"), {}, "reset", id="reset-mid-response"),
        # the client gives up at its timeout; the server's delay only has to be longer
        pytest.param(Fault(kind="slow", delay=4.0), {"timeout": 1.5}, "timeout", id="timeout"),
    ],
)
def test_transport_failures_are_retried(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    fault: Fault,
    options: dict[str, Any],
    error_class: str,
) -> None:
    ws = make_ship_workspace(1)
    fake = FakeTime()
    fault_endpoint.script("/v1/items", fault)
    summary = ship(ws, fault_endpoint, fake, **options)
    assert attempts_of(ws, "test:000000") == [
        (1, None, "error", error_class),
        (2, 201, "accepted", None),
    ]
    assert fake.sleeps == [1]
    assert summary.counts["accepted"] == 1
    assert summary.exit_code == 0


def test_404_on_the_old_path_moves_to_the_fallback(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(3)
    fake = FakeTime()
    fault_endpoint.missing.add("/v1/items")
    notices: list[str] = []
    summary = ship(ws, fault_endpoint, fake, notices, fallback_path="/v2/items")
    lines = log_lines(ws)
    assert [(r["dedupe_key"], r["route"], r["http_status"], r["outcome"]) for r in lines] == [
        ("test:000000", "/v1/items", 404, "error"),
        ("test:000000", "/v2/items", 201, "accepted"),
        ("test:000001", "/v2/items", 201, "accepted"),
        ("test:000002", "/v2/items", 201, "accepted"),
    ]
    assert fake.sleeps == []
    assert any("fallback path /v2/items" in n for n in notices)
    assert summary.counts["accepted"] == 3
    assert summary.exit_code == 0


def test_404_without_a_fallback_halts(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(3)
    fault_endpoint.missing.add("/v1/items")
    with pytest.raises(Halted, match="no fallback path") as caught:
        ship(ws, fault_endpoint, FakeTime())
    assert caught.value.exit_code == EXIT_HALTED
    assert len(fault_endpoint.requests) == 1


def test_413_on_a_single_item_is_a_rejection(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(2)
    fake = FakeTime()
    fault_endpoint.script("/v1/items", Fault(status=413, body={"detail": "too big"}))
    summary = ship(ws, fault_endpoint, fake)
    assert attempts_of(ws, "test:000000") == [(1, 413, "rejected", "http_413")]
    assert attempts_of(ws, "test:000001") == [(1, 201, "accepted", None)]
    assert fake.sleeps == []
    assert summary.counts["rejected"] == 1
    assert summary.exit_code == 0


def test_422_is_rejected_held_on_rerun_and_retried_on_request(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(2)
    fake = FakeTime()
    fault_endpoint.script(
        "/v1/items", Fault(status=422, body={"detail": "data.title: field required"})
    )
    first = ship(ws, fault_endpoint, fake)
    assert first.counts["rejected"] == 1
    assert first.counts["accepted"] == 1
    (line,) = [r for r in log_lines(ws) if r["outcome"] == "rejected"]
    assert line["detail"] == "data.title: field required"
    sent = len(fault_endpoint.requests)
    again = ship(ws, fault_endpoint, fake)
    assert len(fault_endpoint.requests) == sent  # nothing sent: one held, one skipped
    assert again.held == 1
    assert again.counts["skipped"] == 1
    retried = ship(ws, fault_endpoint, fake, retry_rejected=True)
    assert retried.counts["accepted"] == 1
    assert retried.counts["skipped"] == 1
    assert attempts_of(ws, "test:000000")[-1] == (1, 201, "accepted", None)


def test_401_halts_the_whole_run_at_once(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(5)
    fake = FakeTime()
    fault_endpoint.script("/v1/items", Fault(status=401))
    with pytest.raises(Halted, match="refused the credentials") as caught:
        ship(ws, fault_endpoint, fake)
    assert caught.value.exit_code == EXIT_HALTED
    assert attempts_of(ws, "test:000000") == [(1, 401, "error", "auth")]
    assert len(fault_endpoint.requests) == 1
    assert fake.sleeps == []


def test_retries_exhausted_is_error_and_exit_3_then_the_next_run_ships(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(1)
    fake = FakeTime()
    fault_endpoint.script("/v1/items", *[Fault(status=500)] * 4)
    with pytest.raises(Checkpoint, match="ship again next run"):
        ship(ws, fault_endpoint, fake)
    assert [a[2] for a in attempts_of(ws, "test:000000")] == ["error"] * 4
    assert fake.sleeps == [1, 2, 4]
    summary = ship(ws, fault_endpoint, fake)
    assert summary.counts["accepted"] == 1


def test_error_rate_breaker_halts(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(20)
    fault_endpoint.script("/v1/items", *[Fault(status=422)] * 20)
    with pytest.raises(Halted, match="max-error-rate"):
        ship(ws, fault_endpoint, FakeTime(), max_error_rate=0.5, error_window=4)
    # The 4th rejection trips it; one unit may already be queued behind it (the loop
    # keeps two units per worker ahead), nothing after that is sent.
    assert 4 <= len(fault_endpoint.requests) <= 5
    assert len(log_lines(ws)) == len(fault_endpoint.requests)


def test_batch_413_halves_down_with_one_line_per_item_per_attempt(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(4)
    fake = FakeTime()
    fault_endpoint.script("/v1/items/batch", Fault(status=413))
    summary = ship(ws, fault_endpoint, fake, batch_size=4)
    for i in range(4):
        assert attempts_of(ws, f"test:{i:06d}") == [
            (1, 413, "error", "too_large"),
            (2, 201, "accepted", None),
        ]
    assert [len(r.body) for r in fault_endpoint.requests] == [4, 2, 2]
    lines = log_lines(ws)
    assert len({r["batch_id"] for r in lines}) == 3
    assert summary.counts["accepted"] == 4
    assert fake.sleeps == []


def test_missing_batch_route_ships_one_by_one_and_says_so(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(6)
    fault_endpoint.missing.add("/v1/items/batch")
    notices: list[str] = []
    summary = ship(ws, fault_endpoint, FakeTime(), notices, batch_size=3)
    assert fault_endpoint.paths() == ["/v1/items/batch"] + ["/v1/items"] * 6
    assert any("one by one" in n for n in notices)
    assert summary.counts["accepted"] == 6
    assert attempts_of(ws, "test:000000") == [
        (1, 404, "error", "batch_route_missing"),
        (2, 201, "accepted", None),
    ]


def test_batch_items_get_their_own_verdicts_and_retries(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(3)
    fake = FakeTime()
    fault_endpoint.script(
        "/v1/items/batch",
        Fault(
            status=200,
            body={
                "results": [
                    {"status": "accepted", "status_code": 201},
                    {"status": "invalid", "status_code": 422, "problem": {"detail": "bad"}},
                    {"status": "conflict", "status_code": 409},
                ]
            },
        ),
    )
    summary = ship(ws, fault_endpoint, fake, batch_size=3)
    assert attempts_of(ws, "test:000000") == [(1, 201, "accepted", None)]
    assert attempts_of(ws, "test:000001") == [(1, 422, "rejected", "http_422")]
    assert attempts_of(ws, "test:000002") == [
        (1, 409, "error", "http_409"),
        (2, 201, "accepted", None),
    ]
    assert [len(r.body) for r in fault_endpoint.requests] == [3, 1]
    assert fake.sleeps == [1]
    assert summary.counts["accepted"] == 2
    assert summary.counts["rejected"] == 1


def test_batch_503_retry_after_then_ok(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(5)
    fake = FakeTime()
    fault_endpoint.script("/v1/items/batch", Fault(status=503, headers={"Retry-After": "9"}))
    summary = ship(ws, fault_endpoint, fake, batch_size=5)
    assert fake.sleeps == [9]
    assert len(log_lines(ws)) == 10  # 5 items x 2 attempts
    assert summary.counts["accepted"] == 5


def test_concurrency_never_overlaps_a_key_and_delivers_each_once(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(40)
    summary = ship(ws, fault_endpoint, FakeTime(), concurrency=4, batch_size=3)
    assert summary.counts["accepted"] == 40
    assert fault_endpoint.overlaps == []
    assert len(fault_endpoint.rows) == 40
    keys = [r["dedupe_key"] for r in log_lines(ws)]
    assert sorted(keys) == sorted(set(keys))
    assert len(keys) == 40


def test_max_items_is_a_checkpoint_only_when_more_remain(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(5)
    fake = FakeTime()
    with pytest.raises(Checkpoint, match="max-items"):
        ship(ws, fault_endpoint, fake, max_items=3)
    assert len(fault_endpoint.rows) == 3
    summary = ship(ws, fault_endpoint, fake, max_items=2)  # exactly the 2 left: drained
    assert summary.counts["accepted"] == 2
    assert summary.counts["skipped"] == 3


def test_only_and_include_incomplete(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint
) -> None:
    ws = make_ship_workspace(4)
    put_items(ws, {"half": item_data(99)}, complete=False)
    fake = FakeTime()
    notices: list[str] = []
    summary = ship(ws, fault_endpoint, fake, notices, only=["test:000002", "test:half"])
    assert set(fault_endpoint.rows) == {"test:000002"}
    assert notices == ["--only: 1 keys are not among the workspace's complete items: test:half"]
    assert summary.counts["accepted"] == 1
    ship(ws, fault_endpoint, fake, include_incomplete=True)
    assert "test:half" in fault_endpoint.rows
    assert len(fault_endpoint.rows) == 5


def test_dry_run_sends_and_writes_nothing(
    make_ship_workspace: Callable[..., Workspace], fault_endpoint: FaultEndpoint, tmp_path: Path
) -> None:
    ws = make_ship_workspace(3)
    ship(ws, fault_endpoint, FakeTime(), only=["test:000001"])
    put_items(ws, {"000001": item_data(1, version=2)})
    files = {p.name: p.stat().st_mtime_ns for p in ws.path.iterdir()}
    sizes = {p.name: p.stat().st_size for p in ws.path.iterdir()}
    sent = len(fault_endpoint.requests)
    lines: list[str] = []
    shipper = Shipper(ws, ShipOptions(endpoint=fault_endpoint.url, dry_run=True), echo=lines.append)
    shipper.run()
    assert len(fault_endpoint.requests) == sent
    assert {p.name: p.stat().st_size for p in ws.path.iterdir()} == sizes
    assert {p.name: p.stat().st_mtime_ns for p in ws.path.iterdir()} == files
    text = "\n".join(lines)
    assert "ship     test:000000" in text
    assert "(never shipped)" in text
    assert "ship     test:000001" in text
    assert "content changed" in text
    assert "3 would ship" in text
