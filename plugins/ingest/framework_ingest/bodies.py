"""A write's request before its body is parsed: the media type it declares, its body
read within its size cap and its time (413, 408; a client gone mid-body is one INFO
line), its idempotency key, and where the body is parsed (in a worker thread past 64
KiB, so a big body never stalls the event loop). The order in which a write runs these
checks is the app's (:mod:`framework_ingest.app`)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from framework_ingest.errors import ClientGone
from framework_ingest.models import IDEMPOTENCY_KEY_PATTERN
from framework_ingest.problems import ProblemError

__all__ = ["INLINE_PARSE_BYTES", "check_media_type", "idempotency_key", "parsed", "read_body"]

log = logging.getLogger("framework_ingest")

T = TypeVar("T")

# A body up to this size is parsed on the event loop: a thread costs more than the parse
INLINE_PARSE_BYTES = 64 * 1024


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProblemError(413, "too-large", f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:  # chunked bodies carry no length up front
                    raise ProblemError(413, "too-large", f"the body is larger than {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        log.info(
            "%s %s: body not complete after %gs (%d of %s bytes); answered 408",
            request.method,
            request.url.path,
            timeout,
            size,
            declared or "?",
        )
        raise ProblemError(
            408,
            "request-timeout",
            f"the body did not arrive within {timeout:g} seconds",
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        log.info(
            "%s %s: client went away mid-body (%d of %s bytes)",
            request.method,
            request.url.path,
            size,
            declared or "?",
        )
        raise ClientGone from None
    return b"".join(chunks)


_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def check_media_type(request: Request) -> None:
    """A write's body must be JSON: ``application/json`` or ``application/<x>+json``
    (parameters allowed; a charset other than UTF-8 is refused). No Content-Type at all
    is read as JSON, as RFC 9110 leaves that to the recipient."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media, _, params = declared.partition(";")
    media = media.strip().lower()
    charset = ""
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    json_type = media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )
    if not json_type or charset not in ("", "utf-8", "utf8"):
        raise ProblemError(
            415,
            "unsupported-media-type",
            "send the body as 'Content-Type: application/json' (UTF-8)",
        )


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if len(key) > 255 or _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise ProblemError(
            422,
            "validation",
            "Idempotency-Key: 1 to 255 printable ASCII characters without spaces",
            [{"field": "Idempotency-Key", "message": "1 to 255 printable ASCII characters"}],
        )
    return key


async def parsed(body: bytes, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, which parses ``body``: in a worker thread unless the body is small."""
    if len(body) <= INLINE_PARSE_BYTES:
        return work(*args)
    return await run_in_threadpool(work, *args)
