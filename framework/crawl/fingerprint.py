"""What a page's extraction depends on, per page kind, as one digest.

A page's outcome is a function of its body, its row (URL, carried values) and this
digest: the kind's own section of the spec (its fields, records, follow rules, sub-tabs,
pagination, forms), the job-level keys every kind reads (key template, source type,
languages, helper names, allowed domains, settings...), the extraction limits of the
run, and the code that does the extracting (:func:`code_digest`). Two runs that give a
kind the same digest read its pages the same way, so ``framework reparse`` need not read
again the pages of a kind whose digest is the one every stored page of it was read with
(:class:`framework.workspace.Workspace` keeps those: ``read_with``).

It errs towards "changed": any edit of a job-level key other than ``ship`` and
``description`` (which no extraction reads) changes every kind's digest. A sub-tab's
rows take their parent kind's digest (the parent's section holds the sub-tab's spec).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import lxml.etree
import parsel
import regex
import scrapy
import w3lib

import framework
from framework.crawl.page import CompiledJob, helper_names

# job-level keys no extraction reads: editing them re-reads nothing
_NOT_READ = frozenset({"ship", "description"})
# the keys that hold page kinds: each kind's digest takes only its own section
_KIND_KEYS = frozenset({"list_", "detail", "pages"})


def kind_fingerprints(job: CompiledJob) -> dict[str, str]:
    """The digest of every page kind and sub-tab kind of ``job``, by kind name."""
    shared = shared_part(job)
    out: dict[str, str] = {}
    for name, section in kind_sections(job).items():
        digest = section_digest(shared, section)
        out[name] = digest
        for tab in job.kinds[name].subtabs:
            out[tab.kind] = digest
    return out


def shared_part(job: CompiledJob) -> bytes:
    """What every kind's digest takes besides its own section: the code, the job-level
    keys, the helper names and the extraction limits."""
    spec = job.spec
    return _canonical(
        {
            "code": code_digest(),
            "job": spec.model_dump(mode="json", exclude=set(_NOT_READ | _KIND_KEYS)),
            # a carried helper is left out of every kind's items: a job-wide set
            "helpers": sorted(helper_names(spec)),
            "limits": dataclasses.asdict(job.guard.limits),
            "max_body": job.guard.max_body,  # what a gzip sitemap may decompress to
        }
    )


def kind_sections(job: CompiledJob) -> dict[str, str]:
    """Each page kind's own section of the spec, as the text its digest is made of. The
    workspace keeps the one its pages were read with, so that a reparse can tell which
    fields changed since (framework/crawl/narrow.py)."""
    return {
        name: _canonical({"kind": name, "spec": kind.spec.model_dump(mode="json")}).decode()
        for name, kind in job.kinds.items()
    }


def section_digest(shared: bytes, section: str) -> str:
    """The digest of a kind whose section is ``section``, the rest being ``shared``."""
    return hashlib.sha256(shared + b"\0" + section.encode()).hexdigest()[:32]


@functools.cache
def code_digest() -> str:
    """The code a page is read with: the framework's version and source (every module:
    a development checkout keeps its version across commits, and an edit of extraction
    code must reach the next reparse), and the versions of the interpreter (its
    ``re`` and Unicode tables) and of the libraries extraction runs on. Errs towards
    "changed": an edit of any module reads every page again. About 5 ms, once."""
    versions = {
        "framework": framework.__version__,
        "python": sys.version,
        "scrapy": scrapy.__version__,
        "parsel": parsel.__version__,
        "w3lib": w3lib.__version__,
        "lxml": lxml.etree.LXML_VERSION,
        "libxml2": lxml.etree.LIBXML_VERSION,
        "regex": regex.__version__,
    }
    digest = hashlib.sha256(_canonical(versions))
    digest.update(source_digest(Path(framework.__file__).parent).encode())
    return digest.hexdigest()[:32]


def source_digest(root: Path) -> str:
    """A digest of every ``.py`` file under ``root``: paths and contents, in path order
    (none when the package is installed without its sources: the version stands)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


__all__ = [
    "code_digest",
    "kind_fingerprints",
    "kind_sections",
    "section_digest",
    "shared_part",
    "source_digest",
]
