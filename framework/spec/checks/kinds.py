"""The graph of page kinds: their names, where the crawl starts, that every kind is
reached (``start:``, ``to:`` of follow rules and forms), that a helper field is one in
every kind, that some kind emits items, and the dedupe key's template, which may name
only what every emitting kind knows.

:class:`Graph` is also what the per-kind checks ask which names a kind's templates may
use: its own fields and those carried from every kind that leads to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.spec.checks.expressions import template
from framework.spec.checks.report import Path_, Report
from framework.spec.models import KIND_NAME_RE, JobSpec, PageKind

__all__ = ["BUILTIN_NAMES", "Graph", "check_graph", "key_path", "kind_paths", "subtab_hint"]

# Names every template may use besides the record's fields.
BUILTIN_NAMES = frozenset({"id", "source_id", "source_type", "url"})


def kind_paths(spec: JobSpec) -> dict[str, Path_]:
    """Where each page kind is written: ``pages.<name>``, or ``list``/``detail``."""
    return spec.kind_paths()


def key_path(r: Report) -> Path_:
    """Where the key template is written: ``key`` as a string, or ``key.template``."""
    return ("key", "template") if isinstance(r.raw(("key",)), dict) else ("key",)


@dataclass(frozen=True, slots=True)
class Graph:
    """The page kinds of a spec, where each is written, and where each leads."""

    kinds: dict[str, PageKind]
    paths: dict[str, Path_]
    edges: dict[str, set[str]]

    @classmethod
    def of(cls, spec: JobSpec) -> Graph:
        kinds = spec.page_kinds()
        edges = {
            name: {rule.to for rule in kind.follow} | {f.to for f in kind.forms}
            for name, kind in kinds.items()
        }
        return cls(kinds, kind_paths(spec), edges)

    def reach(self, start: str) -> set[str]:
        """The kinds a crawl that starts at ``start`` can get to (``start`` too)."""
        seen = {start}
        todo = [start]
        while todo:
            for nxt in self.edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def known_names(self, name: str) -> set[str]:
        """Fields of this kind and of every kind that leads to it (their values are carried)."""
        names = set(BUILTIN_NAMES)
        for other, kind in self.kinds.items():
            if other == name or name in self.reach(other):
                names.update(kind.fields)
                for form in kind.forms:  # values a form carries to the pages it leads to
                    for fld in form.fields.values():
                        names.update(n for n in (fld.carry, fld.carry_label) if n)
        return names


def check_graph(r: Report, g: Graph) -> None:
    """Kind names, ``start``, kinds never reached, helpers, emitters and the key."""
    spec = r.spec
    kinds, paths = g.kinds, g.paths
    for name in kinds:
        if spec.pages and not KIND_NAME_RE.match(name):
            r.add(
                paths[name],
                f"page kind name {name!r}",
                "lowercase letters, digits, '_'",
                key=True,
            )
    if spec.start is not None and spec.start not in kinds:
        r.add(
            ("start",),
            f"start kind {spec.start!r} is not a page kind",
            f"one of: {', '.join(kinds)}",
        )
    reached = g.reach(spec.start_kind())
    for name in kinds:
        if (spec.start is None or spec.start in kinds) and name not in reached:
            r.add(
                paths[name],
                f"page kind '{name}' is never reached",
                f"`start: {name}` or a follow rule `to: {name}`",
                key=True,
            )
    _helpers(r, g)
    emitters = [n for n, k in kinds.items() if k.emits]
    if not emitters:
        r.add(
            (),
            "no page kind has an `id`, so the job emits no items",
            "`id:` on the kind whose records are items",
        )
    # the dedupe key: names every emitting kind knows
    known_everywhere: set[str] | None = None
    for n in emitters:
        names = g.known_names(n)
        known_everywhere = names if known_everywhere is None else known_everywhere & names
    template(r, key_path(r), spec.key.template, known_everywhere or BUILTIN_NAMES, "key template")


def _helpers(r: Report, g: Graph) -> None:
    """A field name is a helper in every kind or in none: a carried helper is left
    out of the items of every kind it reaches, which would drop a real field."""
    helper_in = {n for k in g.kinds.values() for n, f in k.fields.items() if f.helper}
    for name, kind in g.kinds.items():
        for fname, f in kind.fields.items():
            if fname in helper_in and not f.helper:
                r.add(
                    (*g.paths[name], "fields", fname),
                    f"field '{fname}' is a helper in another page kind but not here",
                    "`helper: true` here too, or another name for one of them",
                    key=True,
                )


def subtab_hint(to: str, kinds: dict[str, PageKind]) -> str:
    """Why a `to:` naming a sub-tab cannot work: a sub-tab is requested per record."""
    for name, kind in kinds.items():
        for tab in kind.subtabs:
            if to in (tab, f"{name}.{tab}"):
                return (
                    f" (it is a sub-tab of '{name}': sub-tabs are requested once per record "
                    "from their `url:` template, never followed from links)"
                )
    return ""
