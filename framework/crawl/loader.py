"""Scrapy's spider loader for job specs: ``scrapy list`` and ``scrapy crawl <job>``.

Set as ``SPIDER_LOADER_CLASS`` by :mod:`framework.scrapy_settings` (which scrapy.cfg
names). It finds every ``projects/*/job.yaml`` under the project root, and builds a
spider class from a spec only when that job is loaded, so one broken spec does not
break ``scrapy crawl`` of another job.
"""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from framework.crawl.process import log_level, preflight
from framework.crawl.spider import JobSpider, spider_class
from framework.errors import FrameworkError
from framework.project import find_root, job_files, packaged_root
from framework.settings import default
from framework.spec import load_spec
from framework.workspace.locate import is_database_url
from framework.workspace.workspace import held_by, lock_held

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.settings import BaseSettings


class JobSpiderLoader:
    def __init__(self, root: Path, workspace_root: Path) -> None:
        self.root = root
        self.workspace_root = workspace_root
        self._files = job_files(root)
        self._loaded: dict[str, type[JobSpider]] = {}
        self.jobdir: str | None = None  # `-s JOBDIR=...`, else the spider's default
        self.fresh = False  # `-s FRAMEWORK_FRESH=1`
        self.parse_only = False  # `scrapy parse`: the workspace is not opened at all

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        try:
            # Built before Scrapy configures logging: a bad -L is said here in one line
            # (Scrapy would end in a traceback).
            log_level(str(settings.get("LOG_LEVEL") or "INFO"))
            root, workspaces = _where(settings)
            loader = cls(root, workspaces)
        except FrameworkError as exc:
            _die(exc)
        loader.jobdir = settings.get("JOBDIR") or None
        loader.fresh = settings.getbool("FRAMEWORK_FRESH", default("FRAMEWORK_FRESH"))
        loader.parse_only = settings.getbool(
            "FRAMEWORK_PARSE_ONLY", default("FRAMEWORK_PARSE_ONLY")
        )
        return loader

    def load(self, spider_name: str) -> type[JobSpider]:
        if spider_name in self._loaded:
            return self._loaded[spider_name]
        path = self._files.get(spider_name)
        if path is None:
            raise KeyError(f"Spider not found: {spider_name}")
        try:
            cls = spider_class(load_spec(path), path, self.workspace_root)
            # Asked here, while an error can still end the command in one line: once the
            # crawl runs, Scrapy reports a failure to start as an asyncio traceback.
            if self.parse_only:
                self._loaded[spider_name] = cls
                return cls
            target = self.jobdir or (cls.custom_settings or {})["JOBDIR"]
            # a database workspace has no lock file or state file to look at here: its
            # advisory lock and its store are taken by the crawl's own open
            if not is_database_url(target):
                jobdir = Path(target)
                holder = held_by(jobdir / "crawl.lock")
                if holder is not None:
                    raise lock_held(jobdir / "crawl.lock", holder)
                preflight(jobdir, fresh=self.fresh)
        except FrameworkError as exc:
            _die(exc)
        self._loaded[spider_name] = cls
        return cls

    def list(self) -> list[str]:
        return sorted(self._files)

    def find_by_request(self, request: Request) -> builtins.list[str]:
        return []


def _where(settings: BaseSettings) -> tuple[Path, Path]:
    """The project root whose ``projects/`` holds the jobs, and the folder of their
    workspaces (``FRAMEWORK_WORKSPACES``, else the root's ``var/``).

    ``FRAMEWORK_ROOT`` names the root. Else ``FRAMEWORK_SPECS_PACKAGE`` names the package
    the specs travel in (a deployed egg, docs/operations.md "Scrapyd"): then the
    workspaces default to ``var/`` in the working directory, as Scrapyd's own logs and
    eggs do, never to the egg or its temporary copy. Else the root is found from the
    working directory (:func:`find_root`)."""
    chosen = settings.get("FRAMEWORK_WORKSPACES")
    if settings.get("FRAMEWORK_ROOT"):
        root = Path(settings.get("FRAMEWORK_ROOT"))
        return root, Path(chosen or root / "var")
    package = settings.get("FRAMEWORK_SPECS_PACKAGE")
    packaged = packaged_root(str(package)) if package else None
    if packaged is not None:
        return packaged, Path(chosen or Path.cwd() / "var")
    root = find_root()
    return root, Path(chosen or root / "var")


def _die(exc: FrameworkError) -> NoReturn:
    # `scrapy crawl` is a command line we do not own; this is its one door for our
    # errors: the message (file:line:col for specs) and the exit code, no traceback.
    print(str(exc), file=sys.stderr)
    raise SystemExit(exc.exit_code)
