"""Eight clients replay the same 1,000 items at once: one row per key, right hashes, a
history row per change, on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from tests.fixtures.ingest import IngestServer, make_item

N_ITEMS = 1000
CLIENTS = 8
BATCH_SIZES = [1, 3, 10, 25, 50, 100, 100, 250]  # client 0 uses the single-item route


def _items(changed: set[int]) -> list[dict[str, Any]]:
    return [
        make_item(str(n), {"n": n, "rev": 2 if n in changed else 1}, source_type=f"src{n % 3}")
        for n in range(N_ITEMS)
    ]


def _client(s: IngestServer, client: int, items: list[dict[str, Any]], seed: int) -> Counter[str]:
    order = list(items)
    random.Random(seed * 100 + client).shuffle(order)
    seen: Counter[str] = Counter()
    with requests.Session() as http:
        size = BATCH_SIZES[client]
        if size == 1:
            for item in order:
                key = f"{item['dedupe_key']}@{item['content_hash']}"
                r = http.post(
                    f"{s.url}/v1/items", json=item, headers={"Idempotency-Key": key}, timeout=60
                )
                assert r.status_code in (200, 201), r.text
                # a replayed key answers what its first delivery got: count it apart
                replayed = r.headers.get("idempotent-replayed") == "true"
                seen["replayed" if replayed else r.json()["status"]] += 1
        else:
            for start in range(0, len(order), size):
                r = http.post(
                    f"{s.url}/v1/items/batch", json=order[start : start + size], timeout=60
                )
                assert r.status_code == 200, r.text
                seen.update(x["status"] for x in r.json()["results"])
    return seen


def _replay(s: IngestServer, items: list[dict[str, Any]], seed: int) -> Counter[str]:
    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(_client, s, c, items, seed) for c in range(CLIENTS)]
        total: Counter[str] = Counter()
        for f in futures:
            total += f.result()
    return total


@pytest.mark.slow
def test_eight_clients_replaying_the_same_items(any_ingest_server: IngestServer) -> None:
    s = any_ingest_server
    changed = set(random.Random(7).sample(range(N_ITEMS), 100))
    first, second = _items(set()), _items(changed)

    round1 = _replay(s, first, seed=1)
    assert round1 == {"accepted": N_ITEMS, "duplicate": (CLIENTS - 1) * N_ITEMS}

    round2 = _replay(s, second, seed=2)
    # Client 0 sends `<key>@<hash>` keys: the unchanged items' keys were used in round 1.
    unchanged = N_ITEMS - len(changed)
    assert round2 == {
        "updated": len(changed),
        "replayed": unchanged,
        "duplicate": CLIENTS * N_ITEMS - len(changed) - unchanged,
    }

    rows = s.rows()
    assert len(rows) == N_ITEMS
    expected = {i["dedupe_key"]: i["content_hash"] for i in second}
    assert {r["dedupe_key"]: r["content_hash"] for r in rows} == expected
    assert {r["dedupe_key"]: r["version"] for r in rows} == {
        i["dedupe_key"]: 2 if int(i["source_id"]) in changed else 1 for i in second
    }
    assert s.history_count() == len(changed)
    for n in sorted(changed)[:20]:
        [old] = s.history(f"src{n % 3}:{n}")
        assert old["content_hash"] == first[n]["content_hash"]
        assert old["data"] == {"n": n, "rev": 1}
    stats = s.stats()
    assert stats["items"] == N_ITEMS
    assert stats["by_status"]["queued"] == N_ITEMS
    assert sum(v["total"] for v in stats["by_source_type"].values()) == N_ITEMS
