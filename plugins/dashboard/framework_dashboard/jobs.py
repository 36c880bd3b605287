"""Which jobs the dashboard shows and where each one's workspace is.

Owns the mapping from a job name to a workspace target: the jobs under
``<root>/projects/`` (``framework list``'s), each at ``<workspace root>/<job>`` (default
``<root>/var``), any folder of the workspace root that holds a workspace without a spec,
and the targets named one by one (``--workspace JOB=DIR`` or ``JOB=postgresql://...``).
A job name in a URL is looked up here and nowhere else: a name that is not listed is not
a path the dashboard opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from framework.errors import UsageError
from framework.project import check_job_name, job_files
from framework.redact import redact_url
from framework.workspace import is_database_url

STATE_FILE = "state.sqlite"  # what makes a folder a workspace (docs/workspace.md)


@dataclass(frozen=True)
class Job:
    name: str
    target: Path | str  # a workspace folder, or a postgresql:// URL
    spec: Path | None  # its job.yaml, when the project has one

    @property
    def is_database(self) -> bool:
        return is_database_url(self.target)

    @property
    def where(self) -> str:
        """How the page names the workspace: a database URL with its password masked."""
        return redact_url(str(self.target))

    def exists(self) -> bool:
        if self.is_database:
            return True  # asked of the server when it is opened
        return (Path(self.target) / STATE_FILE).is_file()


def parse_targets(values: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``JOB=TARGET`` pairs (``--workspace``) as a mapping; UsageError on a bad one."""
    found: dict[str, str] = {}
    for value in values:
        name, sep, target = value.partition("=")
        if not sep or not target:
            raise UsageError(f"--workspace {value!r}: expected JOB=DIR or JOB=postgresql://...")
        found[check_job_name(name.strip())] = target.strip()
    return found


def discover(
    root: Path, workspace_root: Path | None = None, targets: Mapping[str, str] | None = None
) -> dict[str, Job]:
    """Every job to show, by name (sorted)."""
    base = (workspace_root or root / "var").resolve()
    named = dict(targets or {})
    found: dict[str, Job] = {}
    for name, spec in job_files(root, problems=[]).items():
        found[name] = Job(name, _target(named.pop(name, None), base / name), spec)
    if base.is_dir():
        for folder in sorted(base.iterdir()):
            if folder.name not in found and (folder / STATE_FILE).is_file():
                try:
                    check_job_name(folder.name)
                except UsageError:
                    continue  # not a name a job can have: not a job's workspace
                found[folder.name] = Job(folder.name, folder.resolve(), None)
    for name, target in named.items():
        found[name] = Job(name, _target(target, base / name), None)
    return dict(sorted(found.items()))


def _target(named: str | None, default: Path) -> Path | str:
    if named is None:
        return default
    return named if is_database_url(named) else Path(named).resolve()


__all__ = ["Job", "discover", "parse_targets"]
