"""Where things are: the project root, its jobs, and each job's workspace folder.

The project root holds ``projects/<job>/job.yaml`` and the default workspaces under
``var/<job>/``. It is ``$FRAMEWORK_HOME`` when set, else the nearest ancestor of the
working directory that has a ``projects/`` folder or a ``scrapy.cfg``, else the
working directory itself.
"""

from __future__ import annotations

import os
from pathlib import Path


def find_root(start: Path | None = None) -> Path:
    env = os.environ.get("FRAMEWORK_HOME")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "projects").is_dir() or (candidate / "scrapy.cfg").is_file():
            return candidate
    return here


def workspace_path(root: Path, job: str, override: str | Path | None = None) -> Path:
    """The job's workspace (its JOBDIR): ``override`` wins, else ``<root>/var/<job>``."""
    if override is not None and str(override) != "":
        return Path(override).resolve()
    return root / "var" / job
