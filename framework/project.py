"""Where things are: the project root, its jobs, and each job's workspace folder.

The project root holds ``projects/<job>/job.yaml`` and the default workspaces under
``var/<job>/``. It is ``$FRAMEWORK_HOME`` when set, else the nearest ancestor of the
working directory that has a ``projects/`` folder or a ``scrapy.cfg``, else the
working directory itself. In an egg (Scrapyd), the specs travel as data of a Python
package instead: :func:`packaged_root`.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from framework.errors import SpecError, SpecProblem, UsageError


def find_root(start: Path | None = None) -> Path:
    env = os.environ.get("FRAMEWORK_HOME")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "projects").is_dir() or (candidate / "scrapy.cfg").is_file():
            return candidate
    return here


def packaged_root(package: str) -> Path | None:
    """A project root for the specs that travel in the Python package ``package``
    (its ``projects/<job>/job.yaml``, as the egg that ``scrapyd-deploy`` builds holds
    them), or None when the package holds no ``projects/`` (a checkout, where the specs
    are the project root's own). A :class:`UsageError` when there is no such package.

    A package on disk is its own root. One inside a zip (an egg) is copied to a
    temporary folder, removed when the process exits: the spec loader, the spec hash and
    the error messages all read spec files by path."""
    try:
        top = resources.files(package)
    except (ModuleNotFoundError, TypeError) as exc:
        raise UsageError(
            f"FRAMEWORK_SPECS_PACKAGE: {package!r} is not an importable package ({exc})"
        ) from None
    specs = top / "projects"
    if not specs.is_dir():
        return None
    if isinstance(top, Path):
        return top
    copy = Path(tempfile.mkdtemp(prefix=f"framework-specs-{package}-"))
    atexit.register(shutil.rmtree, copy, ignore_errors=True)
    _copy_tree(specs, copy / "projects")
    return copy


def _copy_tree(source: Traversable, target: Path) -> None:
    target.mkdir()
    for entry in source.iterdir():
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        else:
            (target / entry.name).write_bytes(entry.read_bytes())


# What a spec's ``name:`` may be (the spec's models validate it with this). Here, not
# in the models, so that the commands that only read a workspace (status, requeue) check
# a job name without importing pydantic and the spec's models: a fifth of their start.
JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def check_job_name(name: str) -> str:
    """``name`` when it is a job name (what a spec's ``name:`` may be: letters, digits,
    ``_`` or ``-``), else :class:`UsageError`. A job name becomes the folder
    ``var/<job>``: ``../x``, ``/etc`` or ``a/b`` would lead out of it."""
    if not JOB_NAME_RE.match(name):
        raise UsageError(
            f"{name!r} is not a job name (letters, digits, '_' or '-', as in a spec's "
            "name:); to read a workspace elsewhere, pass --workspace DIR"
        )
    return name


def workspace_path(root: Path, job: str, override: str | Path | None = None) -> Path:
    """The job's workspace (its JOBDIR): ``override`` wins, else ``<root>/var/<job>``
    (``job`` must be a job name: :func:`check_job_name`)."""
    if override is not None and str(override) != "":
        return Path(override).resolve()
    return root / "var" / check_job_name(job)


def job_files(root: Path, *, problems: list[SpecProblem] | None = None) -> dict[str, Path]:
    """Every job under ``<root>/projects/*/job.yaml``, by the ``name`` it declares.

    A file whose name cannot be read (broken YAML, no ``name``) is listed under its
    folder's name, so ``framework validate`` can still find and report it. Two files
    declaring the same name raise :class:`SpecError` at the second one's ``name:``
    (or, when ``problems`` is given, are appended to it and the first one is kept).
    """
    from framework.spec.load import read_document

    collect = problems is not None
    if problems is None:
        problems = []
    found: dict[str, Path] = {}
    for path in sorted((root / "projects").glob("*/job.yaml")):
        name = path.parent.name
        mark = (1, 1)
        try:
            doc = read_document(path)
        except SpecError:
            doc = None
        if doc is not None and isinstance(doc.data, dict) and isinstance(doc.data.get("name"), str):
            name = doc.data["name"]
            mark = doc.keys.get(("name",), mark)
        if name in found:
            problems.append(
                SpecProblem(
                    str(path),
                    mark[0],
                    mark[1],
                    f"duplicate job name '{name}', already used by {found[name]}",
                    "a job name unique across projects/",
                )
            )
            continue
        found[name] = path
    if problems and not collect:
        raise SpecError(problems)
    return found


def resolve_job(name_or_path: str, root: Path, *, names_only: bool = False) -> Path:
    """A job name (from ``projects/*/job.yaml``) or a path to a spec file or its folder.
    With ``names_only`` (commands whose argument names a workspace: status, requeue,
    ship) anything but a job name is a :class:`UsageError`, never a path."""
    from framework.errors import JobNotFound

    if names_only:
        check_job_name(name_or_path)
    candidate = Path(name_or_path)
    looks_like_path = (
        name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path or (os.sep in name_or_path)
    )
    if not looks_like_path:
        jobs = job_files(root)
        if name_or_path in jobs:
            return jobs[name_or_path]
    if candidate.is_file():
        return candidate
    if candidate.is_dir() and (candidate / "job.yaml").is_file():
        return candidate / "job.yaml"
    if looks_like_path:
        raise JobNotFound(f"no spec file at {name_or_path}")
    known = ", ".join(sorted(jobs)) or "none"
    raise JobNotFound(
        f"no job named '{name_or_path}' under {root / 'projects'} (known jobs: {known})"
    )
