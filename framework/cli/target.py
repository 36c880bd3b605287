"""Where a command finds a job's workspace: ``--workspace``, else ``FRAMEWORK_WORKSPACE``,
else ``<root>/var/<job>``; a ``postgresql://`` (or ``postgres://``) target is a database
and is passed on as it is (a folder is resolved to an absolute path).

A database URL may carry a password: it is never printed; messages use
:func:`framework.workspace.redact_url` (``Workspace.where``).
"""

from __future__ import annotations

import os
from pathlib import Path

from framework.project import check_job_name, workspace_path
from framework.workspace.locate import is_database_url

ENV = "FRAMEWORK_WORKSPACE"


def chosen(override: str | None) -> str | None:
    """The target the user named: ``--workspace``, else ``FRAMEWORK_WORKSPACE``."""
    if override:
        return override
    return os.environ.get(ENV) or None


def workspace_target(root: Path, job: str, override: str | None) -> Path | str:
    """The job's workspace target (see the module's docstring)."""
    target = chosen(override)
    if target is not None and is_database_url(target):
        return target
    return workspace_path(root, check_job_name(job), target)


__all__ = ["ENV", "chosen", "workspace_target"]
