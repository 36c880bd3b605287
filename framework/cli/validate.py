"""``framework validate``: check spec files before any request is made.

Prints ``ok <file>`` per valid spec on stdout; every problem of the invalid ones goes
out through the raised :class:`SpecError` (the CLI root prints it and exits 2). A valid
spec whose start URLs are on loopback, private or link-local addresses gets a
``note: file:line:col: ...`` line per URL on stderr (still exit 0): allowed, but said;
said only when every spec checked is valid, after the problems would have been.

Besides each spec on its own, it checks the jobs against each other across
``projects/``: two jobs with the same ``source_type`` write the same dedupe keys
(``{source_type}:{source_id}``), so at the ingest endpoint each overwrites the other's
items. That is refused unless every spec involved says the key space is shared on
purpose (``key: {shared: true}``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from framework.errors import SpecError, SpecProblem
from framework.project import find_root, job_files, resolve_job

if TYPE_CHECKING:
    from framework.spec.load import Document


@dataclass(frozen=True)
class _KeySpace:
    path: Path
    source_type: str
    mark: tuple[int, int]  # of the `source_type:` key
    shared: bool


@click.command("validate")
@click.argument("targets", nargs=-1, metavar="[SPEC|JOB]...")
def validate(targets: tuple[str, ...]) -> None:
    """Validate job specs (files, folders or job names; default: every job under projects/).

    Exit 0 when every spec is valid, 2 otherwise with one `file:line:col: ...` line per
    problem. Jobs under projects/ that share a source_type (and so write the same dedupe
    keys) are refused unless each says `key: {shared: true}`.
    """
    from framework.spec import load_spec_document
    from framework.spec.checks.links import link_warnings

    root = find_root()
    problems: list[SpecProblem] = []
    notes: list[SpecProblem] = []
    warnings: list[SpecProblem] = []
    files: list[Path]
    if targets:
        files = [_shown(resolve_job(t, root), typed=t) for t in targets]
    else:
        files = [_shown(p) for p in job_files(root, problems=problems).values()]
        if not files and not problems:
            raise click.UsageError(f"no jobs under {root / 'projects'}; name a spec file")
    for path in files:
        try:
            spec, doc = load_spec_document(path)
        except SpecError as exc:
            problems.extend(exc.problems)
        else:
            click.echo(f"ok {path}")
            notes.extend(private_start_notes(spec.start_urls, doc))
            warnings.extend(link_warnings(spec, doc))
    problems.extend(_shared_key_spaces(root, files, every_job=not targets))
    if problems:
        raise SpecError(problems)  # what must be fixed comes alone: the notes can wait
    for note in notes:
        click.echo(f"note: {note}", err=True)
    for warning in warnings:  # a selector that runs, but gives nothing a crawl requests
        click.echo(f"warning: {warning}", err=True)


def private_start_notes(urls: Sequence[str], doc: Document) -> list[SpecProblem]:
    """A note per start URL on a loopback, private or link-local address (an IP
    literal, or ``localhost``; no name is resolved here): allowed, since the author
    chose it in plain sight, but its job may then follow addresses of that class."""
    from framework.crawl.addresses import address_class, literal

    notes: list[SpecProblem] = []
    for i, url in enumerate(urls):
        try:
            host = (urlsplit(url).hostname or "").rstrip(".")
        except ValueError:
            continue
        ip = literal(host)
        kind = address_class(ip) if ip is not None else None
        if host == "localhost" or host.endswith(".localhost"):
            kind = "loopback"  # RFC 6761: always the local host
        if kind is None:
            continue
        notes.append(
            doc.problem(
                ("start_urls", i),
                f"start URL host {host!r} is a {kind} address: the crawl will request it "
                f"and may follow {kind} addresses from it, on this machine's network "
                "(docs/operations.md, 'Private addresses')",
            )
        )
    return notes


def _shared_key_spaces(root: Path, files: list[Path], *, every_job: bool) -> list[SpecProblem]:
    """One problem per checked spec whose source_type another job under projects/ uses
    too, unless all of them declare the key space shared. With every job checked, the
    first spec (in path order) of a source_type is the one the others collide with."""
    others = [s for s in map(_key_space, job_files(root, problems=[]).values()) if s]
    found: list[SpecProblem] = []
    for space in filter(None, map(_key_space, files)):
        same = [
            o
            for o in others
            if o.source_type == space.source_type and not _same_file(o.path, space.path)
        ]
        if every_job:
            same = [o for o in same if o.path.resolve() < space.path.resolve()]
        if not same or (space.shared and all(o.shared for o in same)):
            continue
        first = same[0]
        found.append(
            SpecProblem(
                str(space.path),
                space.mark[0],
                space.mark[1],
                f"source_type '{space.source_type}' is also the source_type of "
                f"{_shown(first.path)}: both jobs write the same dedupe keys "
                f"({space.source_type}:<id>) and overwrite each other's items at the "
                "ingest endpoint",
                "a source_type of its own, or `key: {shared: true}` in every spec that "
                "shares the key space on purpose",
            )
        )
    return found


def _key_space(path: Path) -> _KeySpace | None:
    """The spec's source_type as written (None when unreadable: its own problems say why)."""
    from framework.spec.load import read_document

    try:
        doc = read_document(path)
    except SpecError:
        return None
    data = doc.data if isinstance(doc.data, dict) else {}
    source_type = data.get("source_type")
    if not isinstance(source_type, str):
        return None
    key = data.get("key")
    shared = isinstance(key, dict) and key.get("shared") is True
    mark = doc.keys.get(("source_type",), (1, 1))
    return _KeySpace(path, source_type, mark, shared)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def _shown(path: Path, typed: str | None = None) -> Path:
    """A job found by name is shown relative to the working directory when it is under
    it (``projects/x/job.yaml:6:3: ...`` from the repository root); a path the user
    typed is shown as typed."""
    if typed is not None and Path(typed) == path:
        return path
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return path
