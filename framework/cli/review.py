"""`framework review <job> [accept|reject KEY...]`: settle candidates held for review.

Owns the command only. A re-crawl holds a candidate as ``review_required`` when it
breaks a change limit of the spec (``max_change``, ``frozen``, a vanished value; see
:mod:`framework.crawl.changes`); the accepted version stays the item that ships. This
lists them with a field-by-field diff against the accepted version, and accepts
(the candidate becomes the item and ships) or rejects (dropped) them by key. It holds
the workspace's ``crawl`` lock, so it never races a crawl, and records every decision
as a ``review_accepted`` / ``review_rejected`` event in ``events.jsonl``.

Keys, field names and values are the site's: what it prints goes through
:func:`framework.terminal.printable` (one line per entry, whatever a key holds) and its
JSON through :func:`framework.jsontext.escape_json`, so none of it can drive the
terminal.
"""

from __future__ import annotations

import json
from typing import Any

import click

from framework.cli.status import open_job_workspace
from framework.errors import UsageError
from framework.jsontext import escape_json
from framework.terminal import printable
from framework.workspace import utc_now
from framework.workspace.holds import INVALID, REVIEW, Hold

_EMPTY: tuple[Any, ...] = (None, "", [], {})


def _show(value: Any) -> str:
    """A value as JSON, what a terminal obeys written as ``\\u`` escapes."""
    return escape_json(json.dumps(value, ensure_ascii=False))


def _echo(line: str) -> None:
    """One line of output: the site's text in it cannot start another, nor act."""
    click.echo(printable(line, keep=""))


def diff_lines(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``field: old -> new`` for every field of the candidate that differs from the
    accepted version (sub-tab data the candidate does not carry is not a difference).
    The lines are raw (a field name as the site chose it): printed by :func:`_echo`."""
    out = []
    for name in new:
        if old.get(name) != new[name]:
            out.append(f"{name}: {_show(old.get(name))} -> {_show(new[name])}")
    return out


@click.command("review")
@click.argument("job")
@click.argument("action", required=False, type=click.Choice(["accept", "reject"]))
@click.argument("keys", nargs=-1)
@click.option(
    "--workspace", "workspace", default=None, help="Workspace folder (default var/<job>)."
)
@click.option("--json", "as_json", is_flag=True, help="List as JSON.")
def review(
    job: str, action: str | None, keys: tuple[str, ...], workspace: str | None, as_json: bool
) -> int:
    """List the records held for review (a change over a limit of the spec) with a
    field-by-field diff, then those held as invalid (a broken rule: the spec or the
    site must change), or settle the ones held for review: `accept KEY...` makes each
    candidate the item (it ships), `reject KEY...` drops it (the accepted version
    stays).

    Exit 0; 2 for a key that is not held for review (nothing is settled then)."""
    if action is None:
        if keys:
            raise UsageError("keys need an action: `framework review JOB accept|reject KEY...`")
        return _list(job, workspace, as_json)
    if not keys:
        raise UsageError(f"`{action}` needs at least one dedupe key (see `framework review {job}`)")
    with open_job_workspace(job, workspace, readonly=False) as ws, ws.lock("crawl"):
        held = {h.dedupe_key: h for h in ws.store.iter_holds(REVIEW)}
        unknown = [k for k in keys if k not in held]
        if unknown:
            shown = ", ".join(printable(k, keep="") for k in unknown)
            raise UsageError(f"not held for review: {shown}")
        for key in dict.fromkeys(keys):
            hold = ws.store.decide_hold(key, accept=action == "accept")
            ws.events.append(
                {
                    "event": f"review_{action}ed",
                    "time": utc_now(),
                    "key": key,
                    "reasons": hold.reasons,
                    "first_held": hold.first_held,
                }
            )
            _echo(f"{key}: {action}ed")
    return 0


def _list(job: str, workspace: str | None, as_json: bool) -> int:
    with open_job_workspace(job, workspace, readonly=True) as ws:
        holds: list[Hold] = list(ws.store.iter_holds(REVIEW))
        # held as invalid: not settled here (the spec or the site must change), listed
        # so that what is held is seen in one place
        invalid: list[Hold] = list(ws.store.iter_holds(INVALID))
        accepted = {}
        for h in holds:
            item = ws.store.get_item(h.dedupe_key)
            accepted[h.dedupe_key] = dict(item.data) if item is not None else {}
    if as_json:
        click.echo(
            escape_json(
                json.dumps(
                    [
                        {
                            "key": h.dedupe_key,
                            "status": h.status,
                            "reasons": h.reasons,
                            "first_held": h.first_held,
                            "last_held": h.last_held,
                            "accepted": accepted.get(h.dedupe_key),
                            "candidate": h.data,
                        }
                        for h in [*holds, *invalid]
                    ],
                    ensure_ascii=False,
                    indent=2,
                )
            )
        )
        return 0
    if not holds:
        _echo(f"{job}: nothing held for review")
    for h in holds:
        why = "; ".join(f"{r['field']} {r['rule']}" for r in h.reasons)
        _echo(f"{h.dedupe_key}  ({why}; held since {h.first_held})")
        for line in diff_lines(accepted[h.dedupe_key], h.data):
            _echo(f"  {line}")
    if invalid:
        click.echo(
            f"held as invalid ({len(invalid)}: they break a rule of the spec; a crawl that "
            "reads them valid stores them, review does not settle them):"
        )
        for h in invalid:
            why = "; ".join(f"{r['field']} {r['rule']} {_show(r.get('value'))}" for r in h.reasons)
            kept = "the last accepted version ships" if h.has_item else "nothing ships"
            _echo(f"{h.dedupe_key}  ({why}; held since {h.first_held}; {kept})")
    return 0
