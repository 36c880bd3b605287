"""Masking of secrets in what the framework writes or shows: records, URLs, keys.

Owns which keys and URL parameters are secret and how they are masked. It reads no
workspace and no file: the crawl's logs, the shipper, the dashboard and the ingest door
(which must never import the crawl's workspace package) all mask with it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "is_secret_key", "is_secret_param", "redact", "redact_url"]

REDACTED = "[redacted]"

# Case-insensitive; '-' and '_' are treated alike. A key is secret when it equals one of
# these or ends with one of the suffixes (x-api-key, csrf_token, db_password ...).
_SECRET_KEYS = {
    "authorization",
    "proxy_authorization",
    "cookie",
    "cookies",
    "set_cookie",
    "token",
    "password",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "secret",
    "api_key",
    "apikey",
    "access_key",
    "secret_key",
    "private_key",
    "signing_key",
    "client_secret",
    "credential",
    "credentials",
    "jwt",
    "bearer",
    "session",
    "sessionid",
}
_SECRET_SUFFIXES = (
    "_token",
    "_password",
    "_passwd",
    "_pwd",
    "_pass",
    "_secret",
    "_api_key",
    "_apikey",
    "_access_key",
    "_secret_key",
    "_private_key",
    "_credential",
    "_credentials",
    "_jwt",
    "_session",
    "_cookie",
)
# Query (and ;path) parameters masked in URL strings: the secret keys above, plus names
# that only mean a credential inside a URL. Exact names, so `?author=` or `?page=` stay.
# Not `_key` as a suffix: the workspace's own records name `dedupe_key`, `item_key`.
_URL_SECRET_PARAMS = {
    "key",
    "sig",
    "signature",
    "auth",
    "sid",
    "sessid",
    "jsessionid",
    "phpsessid",
    "access_token",
    "id_token",
    "x_amz_signature",
    "x_amz_credential",
    "x_amz_security_token",
    "x_goog_signature",
    "x_goog_credential",
}
_URL_PARAM = re.compile(r"([?&;])([^=&#;?\s]+)=([^&#;?\s]*)")
_URL_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://)([^/@\s]+)@", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    # cached: every event line asks it of each of its keys, and the keys repeat
    norm = key.strip().lower().replace("-", "_")
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def is_secret_param(name: str) -> bool:
    """A URL query (or form) parameter whose value is a credential."""
    return is_secret_key(name) or name.strip().lower().replace("-", "_") in _URL_SECRET_PARAMS


def redact_url(value: str) -> str:
    """Mask user:password@ and secret-looking query parameters in a URL string."""
    if "://" not in value:
        return value
    if "@" in value:  # the pattern needs one; most URLs have none (one per event line)
        value = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", value)
    if "=" in value:
        value = _URL_PARAM.sub(_mask_param, value)
    return value


def _mask_param(m: re.Match[str]) -> str:
    name = m.group(2)
    if is_secret_param(name):
        return f"{m.group(1)}{name}={REDACTED}"
    return m.group(0)


def redact(value: Any) -> Any:
    """A copy of ``value`` with secrets masked: values under secret-looking keys become
    ``"[redacted]"`` (at any depth) and URL strings lose credentials and secret query
    parameters."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_key(k) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value
