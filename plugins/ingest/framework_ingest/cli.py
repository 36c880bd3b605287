"""``framework ingest ...``: serve the endpoint and work the handoff from the shell.

Each command opens the database named by ``--db`` (or ``$FRAMEWORK_INGEST_DB``; default
``sqlite:///ingest.db`` in the working directory). Errors are raised from the project's
error tree; only ``framework.cli.main`` turns them into exit codes (``done``/``failed``
with a stale claim: :class:`~framework_ingest.errors.StaleClaim`, exit 5). The token is
read from the environment variable named by ``--token-env``, the signing secrets from
``$FRAMEWORK_INGEST_SIGNING_SECRETS``; neither is ever printed.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from framework.redact import redact_url
from framework_ingest.db import Backend, open_backend
from framework_ingest.errors import IngestConfigError, StaleClaim
from framework_ingest.limits import (
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_ITEM_BYTES,
    DEFAULT_TIMEOUT_BODY,
    DEFAULT_TIMEOUT_HEADER,
    DEFAULT_TIMEOUT_KEEP_ALIVE,
    BodyLimits,
    ServerLimits,
)
from framework_ingest.retention import DAY, RetentionPolicy

DEFAULT_DB = "sqlite:///ingest.db"
SIGNING_SECRETS_ENV = "FRAMEWORK_INGEST_SIGNING_SECRETS"

F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}


class Age(click.ParamType):
    """A duration like ``30d``, ``12h``, ``90m``, ``3600`` (seconds) or ``off`` (keep)."""

    name = "age"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, float):
            return value
        text = str(value).strip().lower()
        if text in ("off", "never", "forever"):
            return None
        match = _DURATION.match(text)
        if not match:
            self.fail(f"{value!r}: expected e.g. 30d, 12h, 90m, 3600 or off", param, ctx)
        return float(match.group(1)) * _UNITS[match.group(2)]


def _retention_options(func: F) -> F:
    for name, default, what in reversed(
        [
            ("--history-age", "30d", "replaced item versions"),
            ("--idempotency-age", "7d", "idempotency keys (and their stored answers)"),
            ("--event-age", "7d", "events (older ones count as delivered)"),
            ("--done-age", "30d", "the data of done items (the key row stays)"),
        ]
    ):
        func = click.option(
            name, type=Age(), default=default, show_default=True, help=f"Keep {what} this long"
        )(func)
    return func


def _policy(
    history: float | None, idem: float | None, event: float | None, done: float | None
) -> RetentionPolicy:
    return RetentionPolicy(
        history_age=history, idempotency_age=idem, event_age=event, done_age=done
    )


_db_option = click.option(
    "--db",
    "db_url",
    default=DEFAULT_DB,
    show_default=True,
    envvar="FRAMEWORK_INGEST_DB",
    help="sqlite:///path.db or postgresql://user@host/db",
)


def beyond_loopback(host: str) -> bool:
    """Whether listening on ``host`` lets other machines connect (a name other than
    ``localhost`` counts as reachable: it may resolve to anything)."""
    if host.lower() in ("localhost", "localhost."):
        return False
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_loopback


def _echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, sort_keys=True))


@click.group()
def ingest() -> None:
    """The reference ingest endpoint and its handoff to the application."""


_POSITIVE = click.IntRange(1)
_SECONDS = click.FloatRange(0.1)

# The help of the options whose default --help shows (see _shown).
_HELP = {
    "--max-body": "Largest request body in bytes (a batch's)",
    "--max-item-bytes": "Largest single item in bytes: the body of POST /v1/items (and of "
    "a cursor PUT), and each element of a batch",
    "--signature-skew": "Seconds a signature's t may differ from the clock (signing: "
    f"${SIGNING_SECRETS_ENV})",
    "--purge-every": "Run retention every N seconds in bounded batches (0: never; see "
    "'ingest purge')",
    "--http": "uvicorn's HTTP parser; auto takes httptools when installed",
    "--loop": "The event loop; auto takes uvloop when installed",
    "--limit-connections": "Open connections at most; at the limit the longest idle one is "
    "closed (0: half the descriptor limit, ulimit -n, at most 1024)",
    "--limit-concurrency": "Requests in progress at most; beyond, 503 with Retry-After",
    "--timeout-header": "Seconds a connection has to send a complete request head",
    "--timeout-body": "Seconds a request body has to arrive (then 408)",
    "--timeout-keep-alive": "Seconds an idle connection is kept open after a response",
    "--auth/--no-auth": "Describe the operations as requiring the bearer token",
    "--signed/--no-signed": "Describe the writes as requiring X-Framework-Signature",
    "--older-than": "Seconds a row may stay running before it is returned to queued",
    "--batch": "Rows per transaction",
}


def _shown(
    flag: str, default: Any, kind: click.ParamType[Any, Any] | None = None, *names: str
) -> Callable[[F], F]:
    """An option whose default ``--help`` shows, its help (if any) from ``_HELP``;
    ``names``: the parameter's name when the flag does not give it."""
    return click.option(
        flag, *names, default=default, show_default=True, type=kind, help=_HELP.get(flag)
    )


@ingest.command()
@_db_option
@_shown("--host", "127.0.0.1")
@_shown("--port", 8700, click.IntRange(0, 65535))
@click.option(
    "--token-env",
    default=None,
    metavar="NAME",
    help="Require 'Authorization: Bearer <token>', the token read from $NAME",
)
@_shown("--max-batch", DEFAULT_MAX_BATCH, _POSITIVE)
@_shown("--max-body", DEFAULT_MAX_BODY, _POSITIVE)
@_shown("--max-item-bytes", DEFAULT_MAX_ITEM_BYTES, _POSITIVE)
@_shown("--access-log/--no-access-log", True)
@_shown("--signature-skew", 300.0, click.FloatRange(1))
@_shown("--purge-every", 0.0, click.FloatRange(0))
@_shown("--purge-batch", 1000, _POSITIVE)
@_retention_options
@_shown("--http", "auto", click.Choice(["auto", "h11", "httptools"]), "http_impl")
@_shown("--loop", "auto", click.Choice(["auto", "asyncio", "uvloop"]))
@_shown("--limit-connections", 0, click.IntRange(0))
@_shown("--limit-concurrency", DEFAULT_LIMIT_CONCURRENCY, _POSITIVE)
@_shown("--timeout-header", DEFAULT_TIMEOUT_HEADER, _SECONDS)
@_shown("--timeout-body", DEFAULT_TIMEOUT_BODY, _SECONDS)
@_shown("--timeout-keep-alive", DEFAULT_TIMEOUT_KEEP_ALIVE, _SECONDS)
def serve(
    db_url: str,
    host: str,
    port: int,
    token_env: str | None,
    max_batch: int,
    max_body: int,
    max_item_bytes: int,
    access_log: bool,
    signature_skew: float,
    purge_every: float,
    purge_batch: int,
    history_age: float | None,
    idempotency_age: float | None,
    event_age: float | None,
    done_age: float | None,
    http_impl: str,
    loop: str,
    limit_connections: int,
    limit_concurrency: int,
    timeout_header: float,
    timeout_body: float,
    timeout_keep_alive: float,
) -> None:
    """Serve POST /v1/items (and the rest of the contract) until interrupted.

    With $FRAMEWORK_INGEST_SIGNING_SECRETS set (comma-separated; two during a rotation)
    every write must carry a valid, fresh, unused X-Framework-Signature."""
    from framework_ingest.app import create_app
    from framework_ingest.serve import bind, run_foreground

    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise IngestConfigError(f"--token-env {token_env}: that variable is unset or empty")
    secrets = [s.strip() for s in os.environ.get(SIGNING_SECRETS_ENV, "").split(",") if s.strip()]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s: %(message)s")
    if token is None and beyond_loopback(host):
        logging.getLogger("framework_ingest").warning(
            "listening on %s without auth: anyone who can reach this port can write and "
            "read items; set --token-env, or serve on 127.0.0.1 behind a proxy that "
            "authenticates",
            host,
        )
    app = create_app(
        db_url,
        token=token,
        bodies=BodyLimits(max_batch, max_body, max_item_bytes, timeout_body),
        signing_secrets=secrets,
        signature_skew=signature_skew,
        purge_every=purge_every or None,
        retention_policy=_policy(history_age, idempotency_age, event_age, done_age),
        purge_batch=purge_batch,
    )
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise IngestConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    bound = sock.getsockname()[1]  # the real one, also when --port 0
    click.echo(
        f"ingest: serving {redact_url(db_url)} on http://{host}:{bound} "
        f"(auth {'bearer token' if token else 'off'}, "
        f"signing {f'{len(secrets)} secret(s)' if secrets else 'off'}, batches up to {max_batch})",
        err=True,
    )
    run_foreground(
        app,
        sock,
        access_log=access_log,
        http=None if http_impl == "auto" else http_impl,
        loop=None if loop == "auto" else loop,
        limits=ServerLimits(
            limit_connections=limit_connections or None,
            limit_concurrency=limit_concurrency,
            timeout_header=timeout_header,
            timeout_keep_alive=timeout_keep_alive,
        ),
    )


@ingest.command()
@click.option("--max-batch", default=DEFAULT_MAX_BATCH, show_default=True, type=click.IntRange(1))
@click.option("--max-body", default=DEFAULT_MAX_BODY, show_default=True, type=click.IntRange(1))
@click.option("--max-item-bytes", default=DEFAULT_MAX_ITEM_BYTES, show_default=True, type=_POSITIVE)
@_shown("--auth/--no-auth", False)
@_shown("--signed/--no-signed", False)
def openapi(max_batch: int, max_body: int, max_item_bytes: int, auth: bool, signed: bool) -> None:
    """Print the OpenAPI description a server with these options serves."""
    from framework_ingest.openapi import build_openapi

    click.echo(
        json.dumps(
            build_openapi(
                BodyLimits(max_batch, max_body, max_item_bytes), auth=auth, signed=signed
            ),
            indent=2,
            ensure_ascii=False,
        )
    )


def _open(db_url: str) -> Backend:
    return open_backend(db_url)


@ingest.command()
@_db_option
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1))
@click.option("--source-type", default=None, help="Only items of this source type")
def claim(db_url: str, limit: int, source_type: str | None) -> None:
    """Claim up to LIMIT queued items (queued -> running); print them as JSON lines,
    each with the claim_id that done/failed must present."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        for item in handoff.claim(backend, limit, source_type):
            _echo_json(item)
    finally:
        backend.close()


_claim_option = click.option(
    "--claim",
    "claim_id",
    required=True,
    metavar="CLAIM_ID",
    help="The claim_id that 'ingest claim' printed with these items (the fencing token)",
)


def _report(outcomes: dict[str, str]) -> None:
    for key, outcome in outcomes.items():
        _echo_json({"dedupe_key": key, "outcome": outcome})
    stale = [k for k, o in outcomes.items() if o == "stale"]
    if stale:
        raise StaleClaim(
            f"{len(stale)} of {len(outcomes)} key(s) stale: the claim was reaped, re-claimed "
            "or the item updated since; their outcome was not recorded, drop the result"
        )


@ingest.command()
@_db_option
@_claim_option
@click.argument("keys", nargs=-1, required=True)
def done(db_url: str, claim_id: str, keys: tuple[str, ...]) -> None:
    """Mark claimed items done. Per key: done, stale (exit 5: the claim no longer holds) or
    skipped (unknown key, or already finished by this claim)."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        outcomes = handoff.done(backend, claim_id, keys)
    finally:
        backend.close()
    _report(outcomes)


@ingest.command()
@_db_option
@_claim_option
@click.argument("keys", nargs=-1, required=True)
@click.option("--reason", required=True, help="Why, kept in last_error")
def failed(db_url: str, claim_id: str, keys: tuple[str, ...], reason: str) -> None:
    """Mark claimed items failed with a reason; outcomes (and exit 5) as for done."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        outcomes = handoff.failed(backend, claim_id, keys, reason)
    finally:
        backend.close()
    _report(outcomes)


@ingest.command()
@_db_option
@_shown("--older-than", 600.0, click.FloatRange(0))
def reap(db_url: str, older_than: float) -> None:
    """Return items stuck in running to queued (attempt counts untouched)."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        keys = handoff.reap(backend, older_than)
    finally:
        backend.close()
    for key in keys:
        _echo_json({"dedupe_key": key, "outcome": "requeued"})
    click.echo(f"reaped {len(keys)}", err=True)


@ingest.command()
@_db_option
def stats(db_url: str) -> None:
    """Print counts by downstream status and source type as JSON."""
    from framework_ingest.store import IngestStore

    backend = _open(db_url)
    try:
        _echo_json(IngestStore(backend).stats())
    finally:
        backend.close()


@ingest.command()
@_db_option
@_retention_options
@_shown("--batch", 1000, _POSITIVE)
def purge(
    db_url: str,
    history_age: float | None,
    idempotency_age: float | None,
    event_age: float | None,
    done_age: float | None,
    batch: int,
) -> None:
    """Apply retention once and print what was removed as JSON. Never touches queued,
    running or failed items; a done item keeps its key row (replays stay duplicates)."""
    from framework_ingest import retention

    backend = _open(db_url)
    try:
        counts = retention.purge(
            backend, _policy(history_age, idempotency_age, event_age, done_age), batch=batch
        )
    finally:
        backend.close()
    _echo_json(counts)
