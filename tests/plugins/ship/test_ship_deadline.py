"""framework_ship.deadline: the shared Retry-After deadline only moves later."""

from __future__ import annotations

import json
import os
from pathlib import Path

from framework_ship.deadline import Deadline, deadline_path, host_of, read_deadline


def test_host_of_keeps_the_port_and_drops_credentials() -> None:
    assert host_of("http://127.0.0.1:8000/v1/items") == "127.0.0.1:8000"
    assert host_of("https://user:pw@Ingest.Example.org/x") == "ingest.example.org"


def test_push_only_moves_later_and_never_deletes(tmp_path: Path) -> None:
    now = [1000.0]
    d = Deadline(tmp_path, "h:1", clock=lambda: now[0])
    assert d.until() == 0.0
    assert d.remaining() == 0.0
    assert d.push(1100.0, "429") == 1100.0
    assert d.push(1050.0, "earlier") == 1100.0  # an earlier demand changes nothing
    record = json.loads(deadline_path(tmp_path, "h:1").read_text())
    assert record["until"] == 1100.0
    assert record["reason"] == "429"
    assert d.remaining() == 100.0
    now[0] = 2000.0
    assert d.remaining() == 0.0
    assert deadline_path(tmp_path, "h:1").exists()  # expired, still there


def test_two_shippers_share_it(tmp_path: Path) -> None:
    a = Deadline(tmp_path, "h:1", clock=lambda: 0.0)
    b = Deadline(tmp_path, "h:1", clock=lambda: 0.0)
    a.push(500.0)
    assert b.until() == 500.0  # b sees a's ban before its next send
    b.push(300.0)
    assert a.until() == 500.0
    b.push(900.0)
    assert a.until() == 900.0


def test_a_damaged_file_does_not_lift_a_known_ban(tmp_path: Path) -> None:
    d = Deadline(tmp_path, "h:1", clock=lambda: 0.0)
    d.push(700.0)
    path = deadline_path(tmp_path, "h:1")
    path.write_text("{not json")
    os.utime(path, ns=(1, 1))
    assert d.until() == 700.0


def test_written_atomically_no_temp_files_left(tmp_path: Path) -> None:
    d = Deadline(tmp_path, "h:1", clock=lambda: 0.0)
    for until in (10.0, 20.0, 30.0):
        d.push(until)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ship-deadline-h_1.json", "ship-deadline-h_1.json.lock"]
    assert read_deadline(tmp_path)["until"] == 30.0  # type: ignore[index]
