"""``framework ingest ...``: serve the endpoint and work the handoff from the shell.

Each command opens the database named by ``--db`` (or ``$FRAMEWORK_INGEST_DB``; default
``sqlite:///ingest.db`` in the working directory). Errors are raised from the project's
error tree; only ``framework.cli.main`` turns them into exit codes. The token is read from
the environment variable named by ``--token-env`` and never printed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import click

from framework.workspace import redact_url
from framework_ingest.db import Backend, open_backend
from framework_ingest.errors import IngestConfigError

DEFAULT_DB = "sqlite:///ingest.db"

_db_option = click.option(
    "--db",
    "db_url",
    default=DEFAULT_DB,
    show_default=True,
    envvar="FRAMEWORK_INGEST_DB",
    help="sqlite:///path.db or postgresql://user@host/db",
)


def _echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, sort_keys=True))


@click.group()
def ingest() -> None:
    """The reference ingest endpoint and its handoff to the application."""


@ingest.command()
@_db_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token-env",
    default=None,
    metavar="NAME",
    help="Require 'Authorization: Bearer <token>', the token read from $NAME",
)
@click.option("--max-batch", default=500, show_default=True, type=click.IntRange(1))
@click.option(
    "--max-body",
    default=16 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request body in bytes",
)
@click.option("--access-log/--no-access-log", default=True, show_default=True)
@click.option(
    "--http",
    "http_impl",
    type=click.Choice(["auto", "h11", "httptools"]),
    default="auto",
    show_default=True,
    help="uvicorn's HTTP parser; auto takes httptools when installed",
)
@click.option(
    "--loop",
    type=click.Choice(["auto", "asyncio", "uvloop"]),
    default="auto",
    show_default=True,
    help="The event loop; auto takes uvloop when installed",
)
def serve(
    db_url: str,
    host: str,
    port: int,
    token_env: str | None,
    max_batch: int,
    max_body: int,
    access_log: bool,
    http_impl: str,
    loop: str,
) -> None:
    """Serve POST /v1/items (and the rest of the contract) until interrupted."""
    from framework_ingest.app import create_app
    from framework_ingest.serve import bind, run_foreground

    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise IngestConfigError(f"--token-env {token_env}: that variable is unset or empty")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s: %(message)s")
    app = create_app(db_url, token=token, max_batch=max_batch, max_body=max_body)
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise IngestConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    bound = sock.getsockname()[1]  # the real one, also when --port 0
    click.echo(
        f"ingest: serving {redact_url(db_url)} on http://{host}:{bound} "
        f"(auth {'bearer token' if token else 'off'}, batches up to {max_batch})",
        err=True,
    )
    run_foreground(
        app,
        sock,
        access_log=access_log,
        http=None if http_impl == "auto" else http_impl,
        loop=None if loop == "auto" else loop,
    )


@ingest.command()
@click.option("--max-batch", default=500, show_default=True, type=click.IntRange(1))
@click.option("--max-body", default=16 * 1024 * 1024, show_default=True, type=click.IntRange(1))
@click.option(
    "--auth/--no-auth",
    default=False,
    show_default=True,
    help="Describe the operations as requiring the bearer token",
)
def openapi(max_batch: int, max_body: int, auth: bool) -> None:
    """Print the OpenAPI description a server with these options serves."""
    from framework_ingest.openapi import build_openapi

    click.echo(
        json.dumps(
            build_openapi(max_batch=max_batch, max_body=max_body, auth=auth),
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
    """Claim up to LIMIT queued items (queued -> running); print them as JSON lines."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        for item in handoff.claim(backend, limit, source_type):
            _echo_json(item)
    finally:
        backend.close()


@ingest.command()
@_db_option
@click.argument("keys", nargs=-1, required=True)
def done(db_url: str, keys: tuple[str, ...]) -> None:
    """Mark claimed items done (a key that is not running is reported skipped)."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        for key, outcome in handoff.done(backend, keys).items():
            _echo_json({"dedupe_key": key, "outcome": outcome})
    finally:
        backend.close()


@ingest.command()
@_db_option
@click.argument("keys", nargs=-1, required=True)
@click.option("--reason", required=True, help="Why, kept in last_error")
def failed(db_url: str, keys: tuple[str, ...], reason: str) -> None:
    """Mark claimed items failed with a reason."""
    from framework_ingest import handoff

    backend = _open(db_url)
    try:
        for key, outcome in handoff.failed(backend, keys, reason).items():
            _echo_json({"dedupe_key": key, "outcome": outcome})
    finally:
        backend.close()


@ingest.command()
@_db_option
@click.option(
    "--older-than",
    default=600.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds a row may stay running before it is returned to queued",
)
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
