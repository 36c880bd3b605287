"""`kill -9` of a real `framework ship` process at random moments, re-run after each,
one by one and in batches, with content changing in between: the server ends with
exactly one row per key holding the final content, and the ship log shows every item
delivered.

A run that ends before its kill (it delivered everything left) is followed by new
content for a sample of items, so the next run has work to be killed in: the test does
not depend on how fast this machine ships."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer
from tests.fixtures.ship import item_data, put_items

FRAMEWORK = str(Path(sys.executable).parent / "framework")
N = 800


def _lines(log: Path) -> int:
    return log.read_bytes().count(b"\n") if log.exists() else 0


@pytest.mark.kill
@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("SHIP_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"SHIP_KILL_SEED={seed}")
    ws = make_ship_workspace(N)
    ws_path = ws.path
    ws.close()
    log = ws_path / "ship-log.jsonl"
    env = {**os.environ, "FRAMEWORK_HOME": str(tmp_path)}
    kills = 0
    runs = 0
    version = [1] * N
    changed = False
    while kills < 6 and runs < 20:
        batch = "1" if runs % 2 == 0 else str(rng.choice([10, 25, 50]))
        runs += 1
        before = _lines(log)
        proc = procs.popen(
            [
                FRAMEWORK,
                "ship",
                "job",
                "--workspace",
                str(ws_path),
                "--endpoint",
                ingest_server.url,
                "--batch-size",
                batch,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # A random moment after delivery started: after 1..150 new log lines.
        target = before + rng.randint(1, 150)
        deadline = time.monotonic() + 60
        while proc.poll() is None and _lines(log) < target and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.random() * 0.05)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if (kills == 2 and not changed) or not killed:
            # Content changes between runs: the final content must win at the server.
            # After a run that finished, it also gives the next run work to be killed in.
            changed = True
            sample = rng.sample(range(N), 40 if killed else 200)
            for i in sample:
                version[i] += 1
            with Workspace.open(ws_path) as w:
                put_items(w, {f"{i:06d}": item_data(i, version=version[i]) for i in sample})
    assert kills >= 5, f"only {kills} kills in {runs} runs (seed {seed})"

    final = procs.run(
        [FRAMEWORK, "ship", "job", "--workspace", str(ws_path), "--endpoint", ingest_server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert final.returncode == 0, final.stderr

    with Workspace.open(ws_path, readonly=True) as w:
        items = {i.dedupe_key: i for i in w.store.iter_items()}
    rows = ingest_server.rows()
    assert len(rows) == N == len(items)
    assert len({r["dedupe_key"] for r in rows}) == N  # one row per key
    for row in rows:
        item = items[row["dedupe_key"]]
        assert row["content_hash"] == item.content_hash, (row["dedupe_key"], seed)
        assert row["data"] == dict(item.data)
    assert {r["data"]["n"]: r["data"]["version"] for r in rows} == dict(enumerate(version))

    # The ship log shows every item delivered with its final content.
    delivered: dict[str, set[str]] = {}
    for raw in log.read_bytes().split(b"\n"):
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a torn line from a kill
        if record["outcome"] in ("accepted", "updated", "duplicate"):
            delivered.setdefault(record["dedupe_key"], set()).add(record["content_hash"])
    for key, item in items.items():
        assert item.content_hash in delivered.get(key, set()), (key, seed)
    # And a last run has nothing left to do.
    again = procs.run(
        [FRAMEWORK, "ship", "job", "--workspace", str(ws_path), "--endpoint", ingest_server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0
    assert f"skipped {N}" in again.stdout
