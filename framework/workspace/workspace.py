"""A job's workspace folder: opens its store and logs, and holds its lock files.

Owns the folder layout (see :mod:`framework.workspace`) and the advisory locks; the
rows and items are the store's, the line format is
:mod:`framework.workspace.jsonl`'s. It never decides *when* to lock or what to log:
the crawl, requeue and ship commands do. Its ``store`` is typed as the
:class:`~framework.workspace.store.Store` protocol: a folder's is SQLite, a database
workspace's (:mod:`framework.workspace.pg_workspace`) PostgreSQL.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from framework.errors import WorkspaceError
from framework.files import make_private_dir, refuse_links

# held_by and lock_held are framework.locks's, still importable from here
from framework.locks import held_by, hold, lock_held
from framework.workspace.jsonl import JsonlLog
from framework.workspace.locate import is_database_url, no_workspace
from framework.workspace.sql import READ_WITH_META, utc_now
from framework.workspace.sqlite import SqliteStore
from framework.workspace.sqlite_base import workspace_fault
from framework.workspace.store import Store

STATE_FILE = "state.sqlite"
URLS_FILE = "urls.jsonl"
EVENTS_FILE = "events.jsonl"
SHIP_LOG_FILE = "ship-log.jsonl"
# the files of a workspace folder that the framework writes (locks aside)
_WRITTEN = (
    STATE_FILE,
    f"{STATE_FILE}-wal",
    f"{STATE_FILE}-shm",
    f"{STATE_FILE}-journal",
    URLS_FILE,
    EVENTS_FILE,
    SHIP_LOG_FILE,
)
SPEC_HISTORY_MAX = 100  # spec hashes kept in meta `spec_history`
UNKNOWN = "unknown"  # the digest of pages read before digests were kept
# meta keys `read_section:<digest>`: the spec section a kind read with that digest has
READ_SECTION_META = "read_section:"


class Workspace:
    """One job's folder. Build with :meth:`open`; close it (or use ``with``)."""

    def __init__(self, path: Path, store: Store, *, readonly: bool) -> None:
        self.path = path
        self.where = str(path)  # how messages name it (a database's URL, password masked)
        self.store = store
        self.readonly = readonly
        # per-host politeness shared by many workers (a database workspace's): None here,
        # where the crawl keeps it in the process and the `not_before` meta
        self.hosts: Any = None
        self.urls: JsonlLog = _FaultTypedLog(path / URLS_FILE, path / STATE_FILE)
        self.events: JsonlLog = _FaultTypedLog(path / EVENTS_FILE, path / STATE_FILE)
        self.ship_log_path = path / SHIP_LOG_FILE
        self.state_path = path / STATE_FILE

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        create: bool = True,
        readonly: bool = False,
        local: Path | None = None,
    ) -> Workspace:
        """Open the workspace at ``path``: a folder, or a ``postgresql://`` URL (a
        :class:`~framework.workspace.pg_workspace.PgWorkspace`, whose ``local`` folder
        keeps what must stay on this machine). ``create`` makes the folder and state
        file when missing; ``readonly`` never writes (for `status` while a crawl runs)."""
        if is_database_url(path):
            from framework.workspace.pg_workspace import PgWorkspace

            return PgWorkspace.open_url(str(path), create=create, readonly=readonly, local=local)
        folder = Path(path)
        state = folder / STATE_FILE
        if readonly or not create:
            if not state.is_file():
                raise no_workspace(folder)
        else:
            if folder.exists() and not folder.is_dir():
                raise WorkspaceError(f"{folder} exists and is not a folder")
            make_private_dir(folder)
        if not readonly:
            # before anything is written: a link is one line now, not a failure at the
            # first log line mid-crawl (O_NOFOLLOW still guards each open, and SQLite,
            # which opens the state files itself, is guarded only by this)
            refuse_links(folder, _WRITTEN)
            refuse_links(folder, (p.name for p in folder.glob("*.lock")))
        store = SqliteStore.open(state, readonly=readonly)
        return cls(folder, store, readonly=readonly)

    def close(self) -> None:
        self.urls.close()
        self.events.close()
        self.store.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_database(self) -> bool:
        """Whether the state is in a database (many workers, many machines)."""
        return False

    # locks -------------------------------------------------------------------
    def lock_path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad lock name {name!r}")
        return self.path / f"{name}.lock"

    @contextmanager
    def lock(self, name: str, *, shared: bool = False) -> Iterator[dict[str, Any]]:
        """Hold ``<workspace>/<name>.lock`` (exclusive, non-blocking ``flock``) for the
        block; ``shared``: a share of it (crawl workers), which names no holder.
        A held lock raises :class:`LockHeld` naming the holder. The flock is the
        truth (the kernel drops it when the holder dies, even by ``kill -9``); the
        file's text only says who holds it, and is emptied on release. Lock files are
        never deleted: deleting one races with a process that has just opened it."""
        path = self.lock_path(name)
        if shared:
            with hold(path, shared=True):
                yield {"pid": os.getpid(), "host": socket.gethostname(), "shared": True}
            return
        with hold(path) as fd:
            info = {"pid": os.getpid(), "host": socket.gethostname(), "started": utc_now()}
            os.ftruncate(fd, 0)
            try:
                os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            except OSError as exc:
                fault = workspace_fault(exc, self.state_path)
                if fault is not None:  # a full disk says so in one line
                    raise fault from exc
                raise
            try:
                yield info
            finally:
                os.ftruncate(fd, 0)

    def lock_holder(self, name: str) -> dict[str, Any] | None:
        """Who holds ``name`` right now, without taking it: asks the flock itself (a
        shared, non-blocking probe on its own descriptor), so a holder killed by
        ``kill -9`` or a reused pid is never reported as running; the file's text
        then names the holder."""
        return held_by(self.lock_path(name))

    # spec --------------------------------------------------------------------
    def spec_hash(self) -> str | None:
        return self.store.get_meta("spec_hash")

    def spec_history(self) -> list[dict[str, str]]:
        raw = self.store.get_meta("spec_history")
        return list(json.loads(raw)) if raw else []

    def record_spec(self, spec_hash: str) -> bool:
        """Record the spec's hash; True when a different one was recorded before (the
        caller announces it with a `spec_changed` event). The first record is False."""
        previous = self.spec_hash()
        if previous == spec_hash:
            return False
        history = self.spec_history()
        history.append({"hash": spec_hash, "time": utc_now()})
        self.store.set_metas(
            {"spec_history": json.dumps(history[-SPEC_HISTORY_MAX:]), "spec_hash": spec_hash}
        )
        return previous is not None

    # what the stored pages were read with ------------------------------------
    # One meta key per (kind, digest) a run may have read pages of that kind with
    # (framework/crawl/fingerprint.py): adding one is an upsert of its own key, so
    # workers that start at once lose none, and a kind with exactly one key had every
    # stored page read with that digest.
    def mark_read_with(
        self, digests: Mapping[str, str], sections: Mapping[str, str] | None = None
    ) -> None:
        """Before a run reads pages: it may read each kind's with ``digests[kind]``. In
        a workspace that stored pages before digests were kept, what those were read
        with is unknown: each kind also gets the digest ``UNKNOWN``, so the next reparse
        reads them all. ``sections``: the spec's section of each kind (by kind), kept by
        digest, so that a later reparse can tell which of a kind's fields changed
        (framework/crawl/narrow.py)."""
        now = utc_now()
        marks = {f"{READ_WITH_META}{k}:{d}": now for k, d in digests.items()}
        marks.update(self._unknown_reads(digests, now))
        for kind, section in (sections or {}).items():
            if kind in digests:
                marks[f"{READ_SECTION_META}{digests[kind]}"] = section
        self.store.set_metas(marks)

    def mark_unknown_reads(self, kinds: Iterable[str]) -> None:
        """What :meth:`mark_read_with` adds in a workspace that stored pages before
        digests were kept, alone: the crawl marks each kind's digest only when it meets
        its first page of the kind, and those older pages are of every kind."""
        marks = self._unknown_reads(kinds, utc_now())
        if marks:
            self.store.set_metas(marks)

    def _unknown_reads(self, kinds: Iterable[str], now: str) -> dict[str, str]:
        if self.store.metas(READ_WITH_META) or not self.store.responses_size()[0]:
            return {}
        return {f"{READ_WITH_META}{k}:{UNKNOWN}": now for k in kinds}

    def read_section(self, digest: str) -> str | None:
        """The spec section a kind's pages were read with under ``digest``, if kept."""
        return self.store.get_meta(f"{READ_SECTION_META}{digest}")

    def read_with(self) -> dict[str, set[str]]:
        """The digests the stored pages of each kind may have been read with."""
        out: dict[str, set[str]] = {}
        for key in self.store.metas(READ_WITH_META):
            kind, _, digest = key[len(READ_WITH_META) :].rpartition(":")
            out.setdefault(kind, set()).add(digest)
        return out

    def settle_read_with(self, digests: Mapping[str, str]) -> None:
        """After every stored page of these kinds was read with ``digests[kind]``:
        forget the others."""
        stale: list[str] = []
        used: set[str] = set()  # the digests some kind is still read with
        for kind, found in self.read_with().items():
            for d in found:
                if kind in digests and d != digests[kind]:
                    stale.append(f"{READ_WITH_META}{kind}:{d}")
                else:
                    used.add(d)
        stale += [
            key
            for key in self.store.metas(READ_SECTION_META)
            if key[len(READ_SECTION_META) :] not in used
        ]
        if stale:
            self.store.delete_metas(stale)


class _FaultTypedLog(JsonlLog):
    """A workspace log whose full disk is :class:`~framework.errors.WorkspaceFull`
    (one line, exit 4), like the state file's, instead of a bare ``OSError``."""

    def __init__(self, path: Path, state: Path) -> None:
        super().__init__(path)
        self._state = state

    def append(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().append(*args, **kwargs)
        except OSError as exc:
            self._typed(exc)

    def append_many(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().append_many(*args, **kwargs)
        except OSError as exc:
            self._typed(exc)

    def _typed(self, exc: OSError) -> NoReturn:
        fault = workspace_fault(exc, self._state)
        if fault is not None:
            raise fault from exc
        raise exc


__all__ = [
    "EVENTS_FILE",
    "SHIP_LOG_FILE",
    "STATE_FILE",
    "URLS_FILE",
    "Workspace",
    "held_by",
    "lock_held",
]
