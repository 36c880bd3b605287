"""What a page's items do to the stored ones: one plan for every store backend.

A commit's items and item parts (sub-tab values) are merged with what is stored under
the same dedupe keys, and each key ends up inserted, updated (its content hash changed),
untouched (identical content: not even ``last_scraped`` moves), or relinked to its row
(identical content whose row was forgotten by ``reset_rows``). The rule is the store
contract's (framework/workspace/store.py); it lives here once so that SQLite and
PostgreSQL cannot drift apart. The stores own only the SQL: reading the known state
(:func:`known`) and writing the plan.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from framework.errors import WorkspaceError
from framework.workspace.records import Outcome, canonical_json


@dataclass
class ItemPlan:
    # (dedupe_key, source_type, source_id, data, content_hash, first_scraped,
    #  last_scraped, declared_complete, parts, row_id): `complete` starts as the declared
    # value; the store's recomputation corrects it from the rows
    inserts: list[tuple[Any, ...]] = field(default_factory=list)
    # (data, content_hash, last_scraped, parts, row_id, declared_complete, source_type,
    #  source_id, dedupe_key): None keeps the stored value (coalesce)
    updates: list[tuple[Any, ...]] = field(default_factory=list)
    relinks: list[tuple[Any, ...]] = field(default_factory=list)  # (row_id, dedupe_key)
    new: int = 0
    unchanged: int = 0
    changed: list[str] = field(default_factory=list)


def keep_parts(data: dict[str, Any], old: dict[str, Any], parts: list[str]) -> None:
    """Carry the stored sub-tab values (``parts``) of ``old`` into ``data`` where the new
    record does not have them: a re-crawled page does not carry its sub-tabs, so identical
    content stays identical and no sub-tab data is lost."""
    for name in parts:
        if name not in data and name in old:
            data[name] = old[name]


def known(stored: str, digest: str, names: str | None, row_id: int | None) -> dict[str, Any]:
    """A stored item as :func:`plan` reads it (data, content_hash, parts, row_id)."""
    return {
        "data": stored,
        "hash": digest,
        "parts": json.loads(names) if names else [],
        "row_id": row_id,
    }


# A store may plan one outcome twice in one commit (SqliteStore: first to see whether it
# writes anything at all): the canonical text and hash of an item's own data, by the
# identity of that data, so that the second plan does not serialise and hash it again.
Digests = dict[int, tuple[str, str]]


def plan(
    outcome: Outcome, before: dict[str, dict[str, Any]], now: str, digests: Digests | None = None
) -> ItemPlan:
    """The writes of ``outcome``'s items and parts, given the stored state of their keys
    (``before``: key -> :func:`known`, absent keys are new). ``digests``: see above."""
    state: dict[str, dict[str, Any]] = {}  # the state after this commit, per key
    for w in outcome.items:
        old = state.get(w.dedupe_key) or before.get(w.dedupe_key)
        data = dict(w.data)
        parts: list[str] = list(old["parts"]) if old else []
        alone = True  # the data is the page's alone (no stored sub-tab value carried in)
        if old and parts:
            keep_parts(data, old["obj"] if "obj" in old else json.loads(old["data"]), parts)
            alone = False
        state[w.dedupe_key] = {
            "obj": data,
            "parts": parts,
            "source_type": w.source_type,
            "source_id": w.source_id,
            "declared": w.complete,
            "row_id": outcome.row_id,
            "own": w.data if alone else None,
        }
    for p in outcome.parts:
        old = state.get(p.dedupe_key)
        if old is None:
            prior = before.get(p.dedupe_key)
            if prior is None:
                raise WorkspaceError(
                    f"part {p.name!r} for unknown item {p.dedupe_key!r} (row {outcome.row_id})"
                )
            old = state[p.dedupe_key] = {
                "obj": json.loads(prior["data"]),
                "parts": list(prior["parts"]),
                "row_id": prior["row_id"],
            }
        old["obj"][p.name] = p.value
        old["own"] = None
        if p.name not in old["parts"]:
            old["parts"].append(p.name)
    out = ItemPlan()
    for key, st in state.items():
        own = st.get("own")
        known = digests.get(id(own)) if digests is not None and own is not None else None
        if known is not None:
            text, digest = known
        else:
            text = canonical_json(st["obj"])
            # == content_hash(st["obj"]), without serialising the data a second time
            digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
            if digests is not None and own is not None:
                digests[id(own)] = (text, digest)
        parts_text = canonical_json(sorted(st["parts"])) if st["parts"] else None
        prior = before.get(key)
        if prior is None:
            out.new += 1
            out.inserts.append(
                (
                    key,
                    st["source_type"],
                    st["source_id"],
                    text,
                    digest,
                    now,
                    now,
                    int(st.get("declared", True)),
                    parts_text,
                    st["row_id"],
                )
            )
        elif prior["hash"] != digest:
            out.changed.append(key)
            declared = st.get("declared")
            out.updates.append(
                (
                    text,
                    digest,
                    now,
                    parts_text,
                    st["row_id"],
                    None if declared is None else int(declared),
                    st.get("source_type"),
                    st.get("source_id"),
                    key,
                )
            )
        else:
            out.unchanged += 1
            if prior["row_id"] is None and st["row_id"] is not None:
                out.relinks.append((st["row_id"], key))  # orphaned by reset_rows
    return out
