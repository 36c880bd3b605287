"""Delivering one unit of items (one item, or one batch) with retries.

Owns the attempt loop of a unit: honour the shared Retry-After deadline before every
send, POST through :class:`~framework_ship.client.IngestClient`, classify each item's
answer, write one ship-log line per item per attempt, retry what is transient (tenacity,
per :mod:`framework_ship.policy`), halve a batch that is too large, fall back to one by
one when the batch route is missing, and follow the fallback path when the endpoint
moved. It returns per-item final outcomes and, when the whole run must stop, the error
that says why (auth refused -> :class:`Halted`; Retry-After over the cap, interrupted ->
:class:`Checkpoint`). It never decides what to ship (that is :mod:`framework_ship.run`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from framework.errors import Checkpoint, FrameworkError, Halted
from framework.http_dates import parse_retry_after
from framework.redact import redact_url
from framework.workspace import StoredItem
from framework_ship.classify import (
    Outcome,
    Verdict,
    classify_status,
    contract_outcome,
    error_class_for_status,
)
from framework_ship.client import (
    BATCH_SUFFIX,
    IngestClient,
    Reply,
    idempotency_key,
    redelivery_key,
)
from framework_ship.deadline import Deadline
from framework_ship.policy import RetryPolicy, build_retrying
from framework_ship.shiplog import Attempt, ShipLog


class RateLimited(Checkpoint):
    """The server asked for a pause longer than the cap: come back later."""


class Interrupted(Checkpoint):
    """SIGINT/SIGTERM: the attempt in flight finished and was logged."""


class Aborted(Checkpoint):
    """A second SIGINT/SIGTERM: the answer waited for was abandoned (not logged; that
    delivery goes out again next run, answered as a duplicate if it had arrived)."""


class AuthRefused(Halted):
    """401/403: the credentials are wrong; retrying would only hammer the endpoint."""


class EndpointGone(Halted):
    """404/405 on every configured path: a human must point the shipper somewhere."""


@dataclass
class UnitResult:
    final: dict[str, str] = field(default_factory=dict)  # key -> outcome word
    stop: FrameworkError | None = None
    # key -> the server's detail of a rejection (unmasked: the run masks what it shows)
    rejected: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class _Want:
    retry_wanted: bool
    retry_after: float | None = None


def item_body(item: StoredItem) -> dict[str, Any]:
    """The contract body of one item, with the URL of the page it came from as ``url``
    when the workspace still knows it (secret-looking parameters masked). The URL is
    metadata: ``content_hash`` is the hash of ``data`` alone, so a page that moved is
    not a new version and is not shipped again."""
    body: dict[str, Any] = {
        "dedupe_key": item.dedupe_key,
        "source_type": item.source_type,
        "source_id": item.source_id,
        "content_hash": item.content_hash,
        "scraped_at": item.last_scraped,
        "data": dict(item.data),
    }
    if item.url is not None:
        body["url"] = redact_url(item.url)
    return body


class Deliverer:
    def __init__(
        self,
        client: IngestClient,
        log: ShipLog,
        policy: RetryPolicy,
        deadline: Deadline,
        stop: threading.Event,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.time,
        on_batch_limit: Callable[[int], None] = lambda size: None,
        mask: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.client = client
        self.mask = mask
        self.log = log
        self.policy = policy
        self.deadline = deadline
        self.stop = stop
        # The real sleep wakes up on SIGINT/SIGTERM so a long backoff never delays exit.
        self.sleep: Callable[[float], None] = sleep if sleep is not None else self._wait
        self.clock = clock
        self.on_batch_limit = on_batch_limit
        self._mutex = threading.Lock()
        self._redelivered: set[tuple[str, str]] = set()
        # the last failed attempt's class and detail (unmasked: the run masks what it
        # shows): what a run whose items failed after retries says about why
        self.last_error: str | None = None
        # One Retrying for all deliveries: tenacity keeps per-call state in the call
        # and per-thread statistics in a threading.local, so sharing it is safe.
        self._retrying = build_retrying(policy, self.sleep)

    def _idem(self, item: StoredItem, body: Mapping[str, Any]) -> str:
        if (item.dedupe_key, item.content_hash) in self._redelivered:
            return redelivery_key(body)
        return idempotency_key(body)

    def _redeliver(self, item: StoredItem) -> bool:
        """Switch ``item`` to its redelivery key; False if it already uses it (then the
        422 stands as a rejection: no loop)."""
        pair = (item.dedupe_key, item.content_hash)
        with self._mutex:
            if pair in self._redelivered:
                return False
            self._redelivered.add(pair)
            return True

    def use_redelivery_key(self, item: StoredItem) -> None:
        """Send ``item`` under its redelivery key from the start: its plain key was
        already answered for a delivery the server may no longer hold."""
        self._redeliver(item)

    def _wait(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def _attempts(self, attempt: Callable[[], _Want]) -> _Want | None:
        """Run ``attempt`` until it wants no retry or the policy says stop.

        The first attempt runs directly and most deliveries end there; only one that
        wants another try enters tenacity's loop, which replays that first result as its
        own first attempt, so the attempts, waits and stops are tenacity's as before.
        (Setting up a tenacity call costs about as much per item as the rest of the
        shipper's own work one by one; measured in docs/benchmarks.md.)"""
        first = attempt()
        if not first.retry_wanted:
            return first
        replay = [first]

        def again() -> _Want:
            return replay.pop() if replay else attempt()

        last: _Want | None = self._retrying(again)
        return last

    def deliver(self, items: Sequence[StoredItem]) -> UnitResult:
        result = UnitResult()
        attempts: dict[str, int] = {}
        try:
            self._deliver(list(items), result, attempts)
        except FrameworkError as exc:
            result.stop = exc
            # Queued units must not start: the whole run stops here.
            self.stop.set()
        return result

    def _deliver(
        self, items: list[StoredItem], result: UnitResult, attempts: dict[str, int]
    ) -> None:
        if len(items) > 1 and self.client.batch_available:
            leftover = self._batch(items, result, attempts)
        else:
            leftover = items
        for item in leftover:
            self._single(item, result, attempts)

    # before every send ------------------------------------------------------------
    def _before_send(self) -> None:
        if self.stop.is_set():
            raise Interrupted("interrupted")
        remaining = self.deadline.remaining()
        if remaining > self.policy.retry_after_cap:
            raise RateLimited(
                f"rate limited: {self.deadline.host} may not be sent to for another "
                f"{remaining:.0f} s (over the cap of {self.policy.retry_after_cap:.0f} s); "
                f"deadline in {self.deadline.path.name}"
            )
        if remaining > 0:
            self.sleep(remaining)
            if self.stop.is_set():
                raise Interrupted("interrupted")

    def _rate_limit(self, reply: Reply) -> float | None:
        """Record a Retry-After demand in the shared deadline; stop if over the cap."""
        if reply.status not in (429, 503):
            return None
        now = self.clock()
        demanded = parse_retry_after(reply.retry_after, now)
        if demanded is None:
            return None
        # The header is the server's text, stored in the deadline file: masked, bounded.
        reason = f"{reply.status} Retry-After: {reply.retry_after}"[:200]
        self.deadline.push(now + demanded, reason=self.mask(reason))
        if demanded > self.policy.retry_after_cap:
            raise RateLimited(
                f"rate limited: {self.deadline.host} answered {reply.status} with Retry-After "
                f"{demanded:.0f} s, over the cap of {self.policy.retry_after_cap:.0f} s; "
                f"deadline written to {self.deadline.path.name}"
            )
        return demanded

    # one item ---------------------------------------------------------------------
    def _single(self, item: StoredItem, result: UnitResult, attempts: dict[str, int]) -> None:
        body = item_body(item)
        key = item.dedupe_key

        def attempt() -> _Want:
            self._before_send()
            while True:
                reply = self.client.post_item(body, self._idem(item, body))
                attempts[key] = attempts.get(key, 0) + 1
                status = reply.status
                if status is None:
                    self._log([item], attempts, reply, Outcome.ERROR, reply.error_class)
                    return _Want(True)
                verdict = classify_status(status)
                if status == 422 and key_reused(reply.body) and self._redeliver(item):
                    self._log([item], attempts, reply, Outcome.ERROR, "idempotency_key_reused")
                    continue  # nothing was stored: send again under the redelivery key
                if verdict is Verdict.MOVED:
                    self._log([item], attempts, reply, Outcome.ERROR, "moved")
                    if self.client.moved(reply.route, status):
                        continue  # nothing was delivered: try the fallback path now
                    raise EndpointGone(
                        f"the endpoint answered {status} on {_path(reply.route)} and no "
                        "fallback path is left (--fallback-path)"
                    )
                break
            if verdict is Verdict.SUCCESS:
                outcome = contract_outcome(status, reply.body, key, item.content_hash)
                if outcome is None:
                    # Not the contract's answer (a proxy's page, someone else's result):
                    # nothing proves the item was stored, so it is tried again.
                    detail = _not_contract(status, reply)
                    self._log([item], attempts, reply, Outcome.ERROR, "bad_response", detail=detail)
                    return _Want(True)
                self._log([item], attempts, reply, outcome, None)
                result.final[key] = outcome
                return _Want(False)
            if verdict is Verdict.REJECTED:
                self._log([item], attempts, reply, Outcome.REJECTED, error_class_for_status(status))
                result.final[key] = Outcome.REJECTED
                result.rejected[key] = reply.detail
                return _Want(False)
            if verdict is Verdict.AUTH:
                self._log([item], attempts, reply, Outcome.ERROR, "auth")
                raise AuthRefused(
                    f"the endpoint refused the credentials ({status}); check --token-env"
                )
            self._log([item], attempts, reply, Outcome.ERROR, error_class_for_status(status))
            return _Want(True, self._rate_limit(reply))

        last = self._attempts(attempt)
        if last is not None and last.retry_wanted:
            result.final[key] = Outcome.ERROR

    # a batch ----------------------------------------------------------------------
    def _batch(
        self, items: list[StoredItem], result: UnitResult, attempts: dict[str, int]
    ) -> list[StoredItem]:
        """Returns the items to send one by one (batch route missing or refused)."""
        pending = list(items)
        leftover: list[StoredItem] = []
        halves: list[list[StoredItem]] = []

        def attempt() -> _Want:
            nonlocal pending, leftover
            self._before_send()
            bodies = [item_body(i) for i in pending]
            reply = self.client.post_batch(
                bodies, [self._idem(i, b) for i, b in zip(pending, bodies, strict=True)]
            )
            for item in pending:
                attempts[item.dedupe_key] = attempts.get(item.dedupe_key, 0) + 1
            status = reply.status
            if status is None:
                self._log(pending, attempts, reply, Outcome.ERROR, reply.error_class, batch=True)
                return _Want(True)
            verdict = classify_status(status)
            if verdict is Verdict.SUCCESS:
                pending = self._batch_results(pending, attempts, reply, result)
                return _Want(bool(pending))
            if verdict is Verdict.AUTH:
                self._log(pending, attempts, reply, Outcome.ERROR, "auth", batch=True)
                raise AuthRefused(
                    f"the endpoint refused the credentials ({status}); check --token-env"
                )
            if verdict is Verdict.MOVED:
                self._log(pending, attempts, reply, Outcome.ERROR, "batch_route_missing", True)
                self.client.batch_missing(reply.route, status)
                leftover, pending = pending, []
                return _Want(False)
            if status == 413 and len(pending) > 1:
                self._log(pending, attempts, reply, Outcome.ERROR, "too_large", batch=True)
                half = len(pending) // 2
                self.on_batch_limit(half)
                halves.extend([pending[:half], pending[half:]])
                pending = []
                return _Want(False)
            if verdict is Verdict.REJECTED:
                # The batch as a whole was refused: let each item get its own verdict.
                self._log(pending, attempts, reply, Outcome.ERROR, "batch_rejected", batch=True)
                leftover, pending = pending, []
                return _Want(False)
            self._log(pending, attempts, reply, Outcome.ERROR, error_class_for_status(status), True)
            return _Want(True, self._rate_limit(reply))

        last = self._attempts(attempt)
        if last is not None and last.retry_wanted:
            for item in pending:
                result.final[item.dedupe_key] = Outcome.ERROR
        for part in halves:
            self._deliver(part, result, attempts)
        return leftover

    def _batch_results(
        self,
        pending: list[StoredItem],
        attempts: dict[str, int],
        reply: Reply,
        result: UnitResult,
    ) -> list[StoredItem]:
        """Log one line per item of a 2xx batch answer; return the items to retry."""
        verdicts = batch_verdicts(reply.body, pending)
        if verdicts is None:
            # Not one valid result per item in order: nothing in it can be trusted, so
            # the whole unit is tried again (idempotency keys make that safe).
            wanted = "one valid result per item in order"
            self._log(
                pending,
                attempts,
                reply,
                Outcome.ERROR,
                "bad_batch_response",
                batch=True,
                detail=_not_contract(reply.status or 0, reply, wanted),
            )
            return pending
        batch_id = uuid.uuid4().hex[:12]
        lines: list[Attempt] = []
        still: list[StoredItem] = []
        for item, (entry, (status, outcome, detail, error_class)) in zip(
            pending, verdicts, strict=True
        ):
            if (
                outcome is Outcome.REJECTED
                and key_reused(entry.get("problem"))
                and self._redeliver(item)
            ):
                outcome, error_class = Outcome.ERROR, "idempotency_key_reused"
            if outcome is Outcome.ERROR:
                still.append(item)
            else:
                result.final[item.dedupe_key] = outcome
                if outcome is Outcome.REJECTED:
                    result.rejected[item.dedupe_key] = detail
            lines.append(
                self._line(
                    item,
                    attempts,
                    reply,
                    outcome,
                    error_class,
                    batch_id,
                    status=status,
                    detail=detail,
                )
            )
        self.log.write(lines)
        return still

    # logging ----------------------------------------------------------------------
    def _line(
        self,
        item: StoredItem,
        attempts: Mapping[str, int],
        reply: Reply,
        outcome: str,
        error_class: str | None,
        batch_id: str | None,
        status: int | None = None,
        detail: str | None = None,
    ) -> Attempt:
        return Attempt(
            dedupe_key=item.dedupe_key,
            content_hash=item.content_hash,
            attempt=attempts.get(item.dedupe_key, 1),
            http_status=status if status is not None else reply.status,
            outcome=str(outcome),
            latency_ms=reply.latency_ms,
            error_class=error_class,
            batch_id=batch_id,
            route=_path(reply.route) + (BATCH_SUFFIX if batch_id else ""),
            detail=detail if detail is not None else reply.detail,
        )

    def _log(
        self,
        items: Sequence[StoredItem],
        attempts: Mapping[str, int],
        reply: Reply,
        outcome: str,
        error_class: str | None,
        batch: bool = False,
        detail: str | None = None,
    ) -> None:
        batch_id = uuid.uuid4().hex[:12] if batch else None
        if outcome == Outcome.ERROR:
            shown = detail if detail is not None else reply.detail
            status = f"HTTP {reply.status}" if reply.status is not None else None
            self.last_error = ": ".join(
                str(p) for p in (error_class or "error", status, shown) if p is not None
            )
        self.log.write(
            [
                self._line(i, attempts, reply, outcome, error_class, batch_id, detail=detail)
                for i in items
            ]
        )


def _path(url: str) -> str:
    return urlsplit(url).path


def _not_contract(status: int, reply: Reply, wanted: str = "the contract's answer") -> str:
    shown = reply.detail
    if shown is None:
        try:
            shown = json.dumps(reply.body, ensure_ascii=False)[:200]
        except (TypeError, ValueError):
            shown = repr(reply.body)[:200]
    return f"a {status} answer that is not {wanted}: {shown}"


def batch_entries(body: Any, expected: int) -> list[Mapping[str, Any]] | None:
    """The per-item results of a batch answer (``{"results": [...]}``); None unless it
    holds exactly ``expected`` objects."""
    entries = body.get("results") if isinstance(body, Mapping) else None
    if not isinstance(entries, list) or len(entries) != expected:
        return None
    if not all(isinstance(e, Mapping) for e in entries):
        return None
    return entries


Verdict4 = tuple[int, Outcome, str | None, str | None]


def batch_verdicts(
    body: Any, items: Sequence[StoredItem]
) -> list[tuple[Mapping[str, Any], Verdict4]] | None:
    """Each item's (entry, verdict) from a 2xx batch answer, or None when the answer
    does not carry one valid result per item, in order (an ``index`` or a
    ``dedupe_key`` that is not the item's own means the results are not ours)."""
    entries = batch_entries(body, len(items))
    if entries is None:
        return None
    out: list[tuple[Mapping[str, Any], Verdict4]] = []
    for position, (item, entry) in enumerate(zip(items, entries, strict=True)):
        index = entry.get("index", position)
        if type(index) is not int or index != position:
            return None
        verdict = entry_verdict(entry, item.dedupe_key, item.content_hash)
        if verdict is None:
            return None
        out.append((entry, verdict))
    return out


def entry_verdict(
    entry: Mapping[str, Any], dedupe_key: str, content_hash: str | None = None
) -> Verdict4 | None:
    """(status code, outcome, detail, error class) of one result of a batch answer, or
    None when it is not a contract result for this item.

    The contract says ``{"status": "accepted|duplicate|updated|invalid|conflict",
    "status_code": 201|200|422|409, "dedupe_key": ..., "problem": {...}}``: the code
    decides; a success must also carry the matching word and the item's own key."""
    code = entry.get("status_code")
    if type(code) is not int:
        return None
    key = entry.get("dedupe_key")
    if key is not None and key != dedupe_key:
        return None
    if 200 <= code < 300:
        outcome = contract_outcome(code, entry, dedupe_key, content_hash)
        if outcome is None:
            return None
        return code, outcome, None, None
    detail = _entry_detail(entry)
    if classify_status(code) is Verdict.REJECTED:
        return code, Outcome.REJECTED, detail, error_class_for_status(code)
    return code, Outcome.ERROR, detail, error_class_for_status(code)


def _entry_detail(entry: Mapping[str, Any]) -> str | None:
    for name in ("problem", "detail", "error"):
        value = entry.get(name)
        if isinstance(value, Mapping):
            value = value.get("detail") or value.get("title")
        if value is not None:
            return str(value)[:300]
    return None


def key_reused(problem: Any) -> bool:
    """Whether a 422 problem says "Idempotency-Key reused with a different body"."""
    if not isinstance(problem, Mapping):
        return False
    kind = problem.get("type")
    return isinstance(kind, str) and kind.endswith("idempotency-key-reused")
