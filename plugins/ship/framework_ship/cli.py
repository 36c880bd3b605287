"""`framework ship <job>`: the command line of shipping.

Owns the options and where each setting comes from: a flag wins over the job spec's
``ship:`` section, which wins over the environment (``FRAMEWORK_SHIP_ENDPOINT``,
``FRAMEWORK_SHIP_TOKEN_ENV``), except that a spec's endpoint on another machine needs
the operator's confirmation (:mod:`framework_ship.endpoint`). It reads the bearer token
from the environment variable named by ``--token-env`` and the signing secret from the
one named by ``--signing-secret-env``, and hands them to the run, never to a log or to
output. The run itself is :mod:`framework_ship.run`; errors go up to the CLI root, which
maps them to exit codes (0 drained, 2 usage, 3 checkpoint, 4 halted).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from framework.cli.target import workspace_target
from framework.errors import JobNotFound, UsageError
from framework.project import find_root, resolve_job
from framework.spec import ShipSettings, load_spec
from framework.workspace import Workspace, is_database_url, utc_now
from framework_ship.client import items_url
from framework_ship.endpoint import (
    ENV_ENDPOINT,
    EndpointNotConfirmed,
    choose_endpoint,
    plain_http_warning,
)
from framework_ship.options import DEFAULT_BATCH_SIZE, ShipOptions
from framework_ship.pg_claims import LEASE_SECONDS
from framework_ship.pg_run import PgShipper
from framework_ship.policy import RetryPolicy
from framework_ship.prune import prune_log
from framework_ship.run import Shipper

ENV_TOKEN_ENV = "FRAMEWORK_SHIP_TOKEN_ENV"  # noqa: S105 - a variable name, not a secret
DEFAULT_SIGNING_SECRET_ENV = "FRAMEWORK_SHIP_SIGNING_SECRET"  # noqa: S105 - a variable name

F = TypeVar("F", bound=Callable[..., Any])


def job_ship_settings(job: str, root: Path) -> ShipSettings | None:
    """The job spec's ``ship:`` section, or None when the job has no spec file (a
    workspace can be shipped without its spec, e.g. on another machine).

    The name goes through the project's one resolver with ``names_only``: it also names
    the workspace folder ``var/<job>``, so ``../x``, ``/etc`` or ``a/b`` (which would lead
    out of it) are a usage error, whether a spec exists or not."""
    try:
        path = resolve_job(job, root, names_only=True)
    except JobNotFound:
        return None
    return load_spec(path).ship


def signing_secret(name: str | None) -> str | None:
    """The signing secret from ``$name`` (default ``$FRAMEWORK_SHIP_SIGNING_SECRET``):
    set, every request is signed; a variable named on purpose must be set."""
    var = name or DEFAULT_SIGNING_SECRET_ENV
    value = os.environ.get(var)
    if value is None:
        if name:
            raise UsageError(f"--signing-secret-env {name}: that environment variable is not set")
        return None
    if not value:
        # Set but empty: signing was meant, and an empty key would sign with nothing.
        raise UsageError(f"--signing-secret-env {var}: the variable is set but empty")
    return value


def _first(*values: str | None) -> str | None:
    for value in values:
        if value:
            return value
    return None


_COUNT = click.IntRange(min=1)
_SECONDS = click.FloatRange(min=0)
_POSITIVE = click.FloatRange(min=0, min_open=True)
_SHARE = click.FloatRange(min=0, max=1, min_open=True)

# The help of the options whose default --help shows (see _shown).
_HELP = {
    "--concurrency": "Deliveries in flight (threads); never two of one key.",
    "--timeout": "Seconds one request may take, all of it (connect, send, answer).",
    "--stop-grace": "At SIGINT/SIGTERM: seconds requests in flight get before they are "
    "abandoned. [$FRAMEWORK_STOP_GRACE]",
    "--retry-after-cap": "Longest Retry-After honoured by sleeping; longer: exit 3.",
    "--max-attempts": "Attempts per item (or batch) before it counts as error.",
    "--max-delay": "Seconds one delivery may spend retrying.",
    "--max-error-rate": "Halt (exit 4) when errors+rejections exceed this share of the window.",
    "--error-window": "Items the error-rate breaker looks back over.",
    "--lease-seconds": "PostgreSQL workspace: how long a claim on a key holds without a heartbeat.",
}


def _shown(
    flag: str, kind: click.ParamType[Any, Any], default: float, **extra: Any
) -> Callable[[F], F]:
    """An option whose default ``--help`` shows, the default taken where the run keeps it
    (ShipOptions, RetryPolicy, pg_claims), so the command and the run cannot disagree."""
    return click.option(
        flag, type=kind, default=default, show_default=True, help=_HELP[flag], **extra
    )


@click.command("ship")
@click.argument("job")
@click.option("--endpoint", default=None, help=f"Ingest URL (base or items URL). [${ENV_ENDPOINT}]")
@click.option(
    "--token-env",
    default=None,
    metavar="NAME",
    help=f"Env variable holding the bearer token. [${ENV_TOKEN_ENV}]",
)
@click.option("--fallback-path", default=None, help="Path tried when the endpoint answers 404/405.")
@click.option(
    "--workspace",
    default=None,
    help="Workspace folder or postgresql:// URL (default $FRAMEWORK_WORKSPACE, else var/<job>).",
)
@click.option(
    "--batch-size",
    type=_COUNT,
    default=None,
    help=f"Items per request via /batch; 1 ships one by one. [default {DEFAULT_BATCH_SIZE}]",
)
@_shown("--concurrency", _COUNT, ShipOptions.concurrency)
@_shown("--timeout", _POSITIVE, ShipOptions.timeout)
@_shown("--stop-grace", _SECONDS, ShipOptions.stop_grace, envvar="FRAMEWORK_STOP_GRACE")
@click.option(
    "--max-items",
    type=click.IntRange(min=0),
    default=None,
    help="Ship at most N items; exit 3 if more remain.",
)
@click.option("--only", multiple=True, metavar="KEY", help="Only these dedupe keys (repeatable).")
@click.option("--include-incomplete", is_flag=True, help="Also ship items with pending sub-tabs.")
@click.option("--retry-rejected", is_flag=True, help="Ship again items rejected before.")
@click.option(
    "--dry-run", is_flag=True, help="Print what would ship and why; send and write nothing."
)
@_shown("--retry-after-cap", _SECONDS, RetryPolicy.retry_after_cap)
@_shown("--max-attempts", _COUNT, RetryPolicy.max_attempts)
@_shown("--max-delay", _SECONDS, RetryPolicy.max_delay)
@_shown("--max-error-rate", _SHARE, ShipOptions.max_error_rate)
@_shown("--error-window", _COUNT, ShipOptions.error_window)
@click.option(
    "--signing-secret-env",
    default=None,
    metavar="NAME",
    help=f"Env variable holding the HMAC signing secret; when set, every request is "
    f"signed (X-Framework-Signature). [default ${DEFAULT_SIGNING_SECRET_ENV}]",
)
@_shown("--lease-seconds", _POSITIVE, LEASE_SECONDS)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve the job's /metrics (Prometheus) on 127.0.0.1:PORT while shipping "
    "(0: any free port, printed); needs the dashboard plugin.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress line.")
@click.option(
    "--prune",
    is_flag=True,
    help="Compact ship-log.jsonl (one success line per key and version, plus what a "
    "replay needs) and exit; ships nothing. With --dry-run: only report.",
)
def ship(
    job: str,
    endpoint: str | None,
    token_env: str | None,
    fallback_path: str | None,
    workspace: str | None,
    batch_size: int | None,
    concurrency: int,
    timeout: float,
    stop_grace: float,
    max_items: int | None,
    only: tuple[str, ...],
    include_incomplete: bool,
    retry_rejected: bool,
    dry_run: bool,
    retry_after_cap: float,
    max_attempts: int,
    max_delay: float,
    max_error_rate: float,
    error_window: int,
    signing_secret_env: str | None,
    lease_seconds: float,
    metrics_port: int | None,
    quiet: bool,
    prune: bool,
) -> int:
    """Deliver the job's stored items to the ingest endpoint (replayable, idempotent).

    Exit codes: 0 drained, 2 usage, 3 come back later (rate limited past the cap,
    --max-items reached, interrupted, items failed after retries), 4 a human must look
    (auth refused, any item rejected this run, error rate over --max-error-rate).
    """
    root = find_root()
    settings = job_ship_settings(job, root) or ShipSettings()
    # --workspace, else FRAMEWORK_WORKSPACE, else var/<job>; a database URL as it is
    target = workspace_target(root, job, workspace)
    if prune and is_database_url(target):
        raise UsageError(
            "--prune compacts ship-log.jsonl; a PostgreSQL workspace keeps its ship log "
            "as the ship_log table (not pruned by framework)"
        )
    if prune:
        return _prune(Path(target), dry_run)
    chosen = choose_endpoint(endpoint, settings.endpoint, os.environ.get(ENV_ENDPOINT))
    endpoint = chosen.url
    if not endpoint and not dry_run:  # a dry run sends nothing: it needs no endpoint
        raise UsageError(
            "no endpoint: pass --endpoint URL, set ship.endpoint in the job spec, "
            f"or ${ENV_ENDPOINT}"
        )
    try:
        if endpoint:
            items_url(endpoint)
    except ValueError as exc:
        raise UsageError(f"{chosen.source}: {exc}") from None
    if chosen.refused is not None:
        if not dry_run:
            raise EndpointNotConfirmed(chosen.refused)
        _notice(f"a real run refuses this endpoint: {chosen.refused}")
    token_var = _first(token_env, settings.token_env, os.environ.get(ENV_TOKEN_ENV))
    token = None
    if token_var:
        token = os.environ.get(token_var)
        if not token:
            raise UsageError(f"--token-env {token_var}: that environment variable is not set")
        if not (token.isascii() and token.isprintable()) or token != token.strip():
            # Never echo the value: say what is wrong with it.
            raise UsageError(
                f"--token-env {token_var}: the token has characters a header cannot carry "
                "(whitespace at an end, control or non-ASCII characters)"
            )
    secret = signing_secret(signing_secret_env)
    warning = plain_http_warning(endpoint, token) if endpoint else None
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    options = ShipOptions(
        endpoint=endpoint or "",
        fallback_path=_first(fallback_path, settings.fallback_path),
        batch_size=batch_size or settings.batch_size or DEFAULT_BATCH_SIZE,
        concurrency=concurrency,
        timeout=timeout,
        stop_grace=stop_grace,
        max_items=max_items,
        only=only,
        include_incomplete=include_incomplete,
        retry_rejected=retry_rejected,
        dry_run=dry_run,
        max_error_rate=max_error_rate,
        error_window=error_window,
        policy=RetryPolicy(
            max_attempts=max_attempts, max_delay=max_delay, retry_after_cap=retry_after_cap
        ),
    )
    with (
        _metrics(job, target, metrics_port),
        Workspace.open(target, create=False, readonly=dry_run) as ws,
    ):
        common: dict[str, Any] = {
            "echo": click.echo,
            "notice": _notice,
            "signing_secret": secret,
            "quiet": quiet,
        }
        if not ws.is_database:
            Shipper(ws, options, token, **common).run()
            return 0
        # one of any number of shippers of the database workspace (claims, fencing)
        shipper = PgShipper(ws, options, token, lease_seconds=lease_seconds, **common)
        try:
            shipper.run()
        finally:
            shipper.close()
    return 0


@contextmanager
def _metrics(job: str, target: Path | str, port: int | None) -> Iterator[None]:
    """``--metrics-port``: the job's /metrics served for the length of the run (the
    core starts the dashboard plugin's server; a missing plugin is a usage error)."""
    if port is None:
        yield
        return
    from framework.plugins import METRICS_HOST, serve_metrics

    handle = serve_metrics(job, target, METRICS_HOST, port)
    click.echo(f"metrics: http://{handle.host}:{handle.port}/metrics (job {job})", err=True)
    try:
        yield
    finally:
        handle.stop()


def _notice(message: str) -> None:
    click.echo(f"notice: {message}", err=True)


def _prune(path: Path, dry_run: bool) -> int:
    with Workspace.open(path, create=False, readonly=dry_run) as ws:
        if dry_run:
            result = prune_log(ws.path, ws.ship_log_path, dry_run=True)
        else:
            with ws.lock("ship"):
                result = prune_log(ws.path, ws.ship_log_path)
                ws.events.append(
                    {
                        "time": utc_now(),
                        "event": "ship_pruned",
                        "lines_before": result.lines_before,
                        "lines_after": result.lines_after,
                        "bytes_before": result.bytes_before,
                        "bytes_after": result.bytes_after,
                    }
                )
    click.echo(result.line())
    return 0


__all__ = ["ship"]
