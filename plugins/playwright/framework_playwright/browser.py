"""Finding the Chromium to drive: a setting, then the environment, then the usual paths.

Playwright's own browser builds are not used (they cannot be downloaded on every
machine, and users with a system browser do not need them): the path found here goes
to Playwright as ``executable_path``, which overrides its headless-shell lookup.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from framework.errors import UsageError

__all__ = ["CANDIDATES", "ENV", "SETTING", "BrowserNotFound", "find_chromium"]

SETTING = "FRAMEWORK_CHROMIUM"  # a Scrapy setting (spec `settings:` or `-s`) ...
ENV = "FRAMEWORK_CHROMIUM"  # ... else this environment variable ...
CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")  # ... else these
INSTALL = "install it (Debian/Ubuntu: apt-get install chromium) or set FRAMEWORK_CHROMIUM"


class BrowserNotFound(UsageError):
    """No usable Chromium: the message says where it looked and what to install."""


def find_chromium(
    setting: str | None = None,
    env: Mapping[str, str] | None = None,
    candidates: Sequence[str] | None = None,
) -> Path:
    """The Chromium executable to launch. A path named by the setting or the
    environment must be an executable file (no silent fallback past a wrong one)."""
    env = os.environ if env is None else env
    candidates = CANDIDATES if candidates is None else candidates
    for source, value in ((f"the {SETTING} setting", setting), (f"${ENV}", env.get(ENV))):
        if value:
            path = Path(value)
            if not _executable(path):
                raise BrowserNotFound(
                    f"render: playwright needs Chromium, but {source} names {value}, which is "
                    f"not an executable file; {INSTALL} to its path"
                )
            return path
    for candidate in candidates:
        if _executable(Path(candidate)):
            return Path(candidate)
    raise BrowserNotFound(
        f"render: playwright needs Chromium and none was found ({ENV} is unset; "
        f"{', '.join(candidates)} not there); {INSTALL}"
    )


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
