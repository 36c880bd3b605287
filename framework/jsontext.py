"""A JSON object read from text that may be anything: a lock file, a log line that may
be torn, a summary kept in a database.

What the core and its plugins read back of what they wrote is a JSON object or worth
nothing: text that is not JSON, or JSON that is not an object, is read as None, so a
damaged or foreign value is skipped, never raised on.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_object"]


def json_object(text: str | bytes) -> dict[str, Any] | None:
    """``text`` as a JSON object, or None when it is not JSON or not an object."""
    try:
        value = json.loads(text)
    except ValueError:  # UnicodeDecodeError of bytes too
        return None
    return value if isinstance(value, dict) else None
