"""YAML -> :class:`JobSpec`, with every problem located to ``file:line:col``.

Owns reading a spec file safely and mapping model errors back to the YAML text:

* bytes: a size cap, strict UTF-8 (a bad byte is reported at its line and column);
* YAML: composed with PyYAML's safe loader into a node tree, so every key and value
  keeps its mark. Aliases are budgeted *while composing*, before anything is expanded:
  an alias bomb ("billion laughs") or a recursive alias is refused in milliseconds.
  A spec is data: an explicit tag other than the plain core ones (``!!str``, ``!!int``,
  ``!!float``, ``!!bool``, ``!!null``, ``!!map``, ``!!seq``, ``!!merge``) is refused
  wherever it stands (on a scalar, a mapping, a sequence, a key, a merge source, the
  root), also while composing, because the builder below reads mappings and sequences
  itself and would never ask the tag what it means;
* the node tree becomes plain data (duplicate keys refused, ``<<`` merge keys honoured,
  every key read as a string) plus a table of marks by path;
* pydantic validates the data; each error's ``loc`` is mapped to the mark of the node
  it names, with a did-you-mean for misspelled keys.

It must not check meaning across keys (selectors, templates, page kinds): that is
:mod:`framework.spec.validate`. Problems are collected, not stopped at the first.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from framework.errors import SpecError, SpecProblem
from framework.spec.models import SOURCE_KEYS, FieldSpec, JobSpec

__all__ = [
    "MAX_ALIASES",
    "MAX_BYTES",
    "MAX_EXPANDED_NODES",
    "Document",
    "allowed_keys",
    "load_document",
    "parse_document",
    "read_document",
]

MAX_BYTES = 1024 * 1024
MAX_ALIASES = 200  # alias uses per file
MAX_EXPANDED_NODES = 20_000  # nodes that all aliases together may add once expanded

Path_ = tuple[str | int, ...]
_YAML_TAG = "tag:yaml.org,2002:"
_MERGE_TAG = _YAML_TAG + "merge"
# Explicit tags a spec may write ("!" is YAML's non-specific tag: "read me as text").
# Everything else (python/*, binary, set, omap, timestamp, a %TAG shorthand, !custom,
# !<verbatim>) would construct something other than plain data, or mean nothing.
_PLAIN_TAGS = frozenset(
    {"!"} | {_YAML_TAG + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge")}
)


@dataclass
class Document:
    """A spec file read into plain data, with the mark of every key and value."""

    file: str
    data: Any
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # 1-based
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def mark(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """The mark of the deepest known node on ``path`` (its key's mark if asked)."""
        path = tuple(path)
        while path:
            if key and path in self.keys:
                return self.keys[path]
            if path in self.values:
                return self.values[path]
            path = path[:-1]
        return self.values.get((), (1, 1))

    def problem(
        self, path: Path_, what: str, expected: str = "", *, key: bool = False
    ) -> SpecProblem:
        line, col = self.mark(path, key=key)
        return SpecProblem(self.file, line, col, what, expected)


class _Refused(Exception):
    def __init__(self, mark: Any, what: str, expected: str = "") -> None:
        self.line = mark.line + 1 if mark is not None else 1
        self.col = mark.column + 1 if mark is not None else 1
        self.what = what
        self.expected = expected


class _Loader(yaml.SafeLoader):
    """A safe loader whose composer budgets aliases before any expansion."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0
        self.expanded = 0
        self._sizes: dict[int, int] = {}
        self._open: set[str] = set()  # anchors whose node is still being composed
        self.bad_tags: list[tuple[Any, str]] = []  # (mark, tag) of every refused tag

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        # Every node, key or value, scalar or collection, passes here once as it is
        # written (an alias has no tag of its own: its anchor's node was checked).
        tag = getattr(self.peek_event(), "tag", None)
        if tag is not None and tag not in _PLAIN_TAGS:
            self.bad_tags.append((self.peek_event().start_mark, tag))
        if not self.check_event(AliasEvent):
            anchor = getattr(self.peek_event(), "anchor", None)
            if anchor is None:
                return super().compose_node(parent, index)  # type: ignore[return-value]
            self._open.add(anchor)
            try:
                return super().compose_node(parent, index)  # type: ignore[return-value]
            finally:
                self._open.discard(anchor)
        event = self.peek_event()
        if event.anchor in self._open:
            raise _Refused(
                event.start_mark,
                "a YAML alias refers to itself",
                "a spec without recursive aliases",
            )
        self.alias_count += 1
        if self.alias_count > MAX_ALIASES:
            raise _Refused(
                event.start_mark,
                f"more than {MAX_ALIASES} YAML aliases",
                "a spec without alias expansion tricks (write the values out)",
            )
        target = self.anchors.get(event.anchor)
        if target is not None:
            self.expanded += self._size(target, event.start_mark, set())
            if self.expanded > MAX_EXPANDED_NODES:
                raise _Refused(
                    event.start_mark,
                    f"YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes (an alias bomb?)",
                    "aliases that repeat small parts only",
                )
        return super().compose_node(parent, index)  # type: ignore[return-value]

    def _size(self, node: Node, mark: Any, visiting: set[int]) -> int:
        key = id(node)
        known = self._sizes.get(key)
        if known is not None:
            return known
        if key in visiting:
            raise _Refused(
                mark, "a YAML alias refers to itself", "a spec without recursive aliases"
            )
        visiting.add(key)
        size = 1
        if isinstance(node, SequenceNode):
            for child in node.value:
                size += self._size(child, mark, visiting)
                if size > MAX_EXPANDED_NODES:
                    break
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                size += self._size(k, mark, visiting) + self._size(v, mark, visiting)
                if size > MAX_EXPANDED_NODES:
                    break
        visiting.discard(key)
        self._sizes[key] = size
        return size


def _one(file: str, line: int, col: int, what: str, expected: str = "") -> SpecError:
    return SpecError([SpecProblem(file, line, col, what, expected)])


def _decode(raw: bytes, file: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = raw.count(b"\n", 0, start) + 1
        line_start = raw.rfind(b"\n", 0, start) + 1
        col = len(raw[line_start:start].decode("utf-8", errors="replace")) + 1
        raise _one(
            file,
            line,
            col,
            f"invalid UTF-8 byte 0x{raw[start]:02x} at byte offset {start}",
            "a UTF-8 text file",
        ) from None
    return text.removeprefix("\ufeff")


def read_document(path: str | Path) -> Document:
    """Read and compose a spec file into plain data with marks (no model validation)."""
    p = Path(path)
    file = str(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise _one(file, 1, 1, f"spec file is {size} bytes", f"at most {MAX_BYTES} bytes")
        raw = p.read_bytes()
    except OSError as exc:
        raise _one(
            file, 1, 1, f"cannot read spec file: {exc.strerror or exc}", "a readable file"
        ) from None
    if len(raw) > MAX_BYTES:
        raise _one(file, 1, 1, f"spec file is {len(raw)} bytes", f"at most {MAX_BYTES} bytes")
    return read_text(_decode(raw, file), file)


def read_text(text: str, file: str = "<spec>") -> Document:
    """Compose YAML text (already decoded) into a :class:`Document`."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # the reader checks every character here
        root = loader.get_single_node()
    except _Refused as exc:
        raise _one(file, exc.line, exc.col, exc.what, exc.expected) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        what = f"YAML syntax error: {exc.problem or exc.context or 'unreadable'}"
        if exc.context and exc.problem:
            what = f"YAML syntax error: {exc.problem} ({exc.context})"
        raise _one(file, line, col, what, "valid YAML") from None
    except yaml.reader.ReaderError as exc:  # a control character: located by its offset
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        code = (
            exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        )
        what = f"control character U+{code:04X} is not allowed in YAML"
        raise _one(file, line, col, what, "printable text") from None
    except yaml.YAMLError as exc:
        raise _one(file, 1, 1, f"YAML error: {exc}", "valid YAML") from None
    except RecursionError:
        raise _one(file, 1, 1, "YAML nesting is too deep", "a spec nested a few levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    assert loader is not None  # composing raised otherwise
    if loader.bad_tags:
        raise SpecError(
            [
                SpecProblem(
                    file,
                    mark.line + 1,
                    mark.column + 1,
                    f"YAML tag {_show_tag(tag)!r} is not allowed (a spec is data, not objects)",
                    "plain YAML values, without tags",
                )
                for mark, tag in loader.bad_tags
            ]
        )
    if root is None:
        raise _one(
            file,
            1,
            1,
            "the spec file is empty",
            "a mapping with name, source_type, start_urls, ...",
        )
    doc = Document(file=file, data=None)
    if not isinstance(root, MappingNode):
        shape = "a list" if isinstance(root, SequenceNode) else "a single value"
        m = root.start_mark
        raise _one(
            file,
            m.line + 1,
            m.column + 1,
            f"the spec is {shape}",
            "a mapping of keys at the top (name: ..., source_type: ..., start_urls: ...)",
        )
    problems: list[SpecProblem] = []
    try:
        doc.data = _Builder(loader, doc, problems).build(root, ())
    except RecursionError:
        raise _one(file, 1, 1, "YAML nesting is too deep", "a spec nested a few levels") from None
    if problems:
        raise SpecError(problems)
    return doc


def _show_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML_TAG) if tag.startswith(_YAML_TAG) else tag


class _Builder:
    """Node tree -> plain data, recording marks; aliases were budgeted while composing."""

    def __init__(self, loader: _Loader, doc: Document, problems: list[SpecProblem]) -> None:
        self.loader = loader
        self.doc = doc
        self.problems = problems

    def _problem(self, node: Node, what: str, expected: str = "") -> None:
        m = node.start_mark
        self.problems.append(SpecProblem(self.doc.file, m.line + 1, m.column + 1, what, expected))

    def build(self, node: Node, path: Path_) -> Any:
        m = node.start_mark
        self.doc.values.setdefault(path, (m.line + 1, m.column + 1))
        if isinstance(node, ScalarNode):
            try:
                return self.loader.construct_object(node)
            except yaml.YAMLError as exc:
                problem = getattr(exc, "problem", None) or str(exc)
                self._problem(node, f"unreadable value: {problem}", "a plain YAML value")
                return None
        if isinstance(node, SequenceNode):
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        assert isinstance(node, MappingNode)
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                for src in self._merge_sources(value_node, path):
                    for k, v in src.items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, ScalarNode):
                self._problem(key_node, "a key must be a plain word", "a scalar key")
                continue
            key = str(key_node.value)
            kpath = (*path, key)
            km = key_node.start_mark
            if key in out:
                first = self.doc.keys.get(kpath, (0, 0))
                self._problem(
                    key_node,
                    f"duplicate key '{key}' (first at line {first[0]})",
                    "each key once per mapping",
                )
                continue
            self.doc.keys[kpath] = (km.line + 1, km.column + 1)
            out[key] = self.build(value_node, kpath)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out

    def _merge_sources(self, node: Node, path: Path_) -> list[dict[str, Any]]:
        nodes = node.value if isinstance(node, SequenceNode) else [node]
        found = []
        for n in nodes:
            if not isinstance(n, MappingNode):
                self._problem(n, "a `<<` merge takes a mapping", "a mapping or a list of mappings")
                continue
            value = self.build(n, path)
            found.append(value)
        return found


# ---------------------------------------------------------------- model errors


def _unwrap(annotation: Any) -> list[Any]:
    """The candidate types of an annotation (Optional/Union flattened)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        out = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    return [annotation]


def _keys_of(model: type[BaseModel]) -> list[str]:
    keys: list[str] = []
    for name, info in model.model_fields.items():
        if model is FieldSpec and name == "sources":
            keys.extend(SOURCE_KEYS)
            continue
        keys.append(info.alias or name)
    return keys


def _field_of(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _walk(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that owns the last component of ``loc`` (for allowed-key lists)."""
    current: Any = JobSpec
    i = 0
    parts = list(loc[:-1])
    while i < len(parts):
        part = parts[i]
        candidates = _unwrap(current)
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        container = next(
            (c for c in candidates if typing.get_origin(c) in (dict, tuple, list)), None
        )
        if model is not None and isinstance(part, str) and _field_of(model, part) is not None:
            current = _field_of(model, part)
        elif container is not None:
            args = [a for a in typing.get_args(container) if a is not Ellipsis]
            current = args[-1] if args else Any
        elif isinstance(part, str) and any(
            getattr(c, "__name__", "") in part for c in candidates if isinstance(c, type)
        ):
            pass  # a union branch tag such as "function-after[..., Pagination]"
        else:
            return None
        i += 1
    for c in _unwrap(current):
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """Keys a mapping at ``loc[:-1]`` accepts (by the models), for did-you-mean."""
    model = _walk(loc)
    return _keys_of(model) if model is not None else []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _expected_from(msg: str) -> str:
    text = msg.removeprefix("Input should be ")
    for cls_hint in ("a valid dictionary or instance of ", "a valid dictionary"):
        if cls_hint in text:
            return "a mapping"
    text = text.replace("a valid list", "a list").replace("a valid tuple", "a list")
    return text.split(", unable to")[0]


def _path_of(loc: tuple[Any, ...], doc: Document) -> tuple[Path_, bool]:
    """The YAML path a pydantic ``loc`` points to, skipping model-internal parts
    (union branch tags, the gathered ``sources``). The flag says the last part of
    ``loc`` exists in the YAML."""
    path: list[str | int] = []
    exists = True
    for part in loc:
        candidate = (*path, part)
        if candidate in doc.values or candidate in doc.keys:
            path.append(part)
            exists = True
        else:
            exists = False
    return tuple(path), exists


# The models' rules, said as "what is wrong; expected what" (unknown messages pass as they are).
_RULES: dict[str, tuple[str, str]] = {
    "a nested group needs `each` (which elements are its rows)": (
        "a nested group without `each`",
        "`each:` saying which elements are its rows",
    ),
    "a field needs a source (css, xpath, json, re, url, embedded, count or const)": (
        "a field with no source",
        "one of css, xpath, json, re, url, embedded, count, const (or a default)",
    ),
    "a follow rule takes exactly one of css, xpath or pattern": (
        "a follow rule with none or several of css, xpath, pattern",
        "exactly one of css, xpath or pattern",
    ),
    "pagination takes exactly one of `next` (a link) or `param`": (
        "pagination with none or both of `next` and `param`",
        "exactly one of `next` (a link) or `param` (a page number or offset)",
    ),
    "a body takes exactly one of `form` or `json`": (
        "a body with none or both of `form` and `json`",
        "exactly one of `form` or `json`",
    ),
    "a body needs `method: POST`": ("a body on a GET sub-tab", "`method: POST`"),
    "a sub-tab needs `each` (rows) or `fields`": (
        "a sub-tab with neither `each` nor `fields`",
        "`each` (rows) and/or `fields`",
    ),
    "a job name is letters, digits, '_' or '-' (at most 64)": (
        "invalid job name",
        "letters, digits, '_' or '-' (at most 64)",
    ),
    "a source_type is lowercase letters, digits, '.', '_' or '-'": (
        "invalid source_type",
        "lowercase letters, digits, '.', '_' or '-' (at most 64)",
    ),
    "write pages either as `list`/`detail` or as `pages`, not both": (
        "both `list`/`detail` and `pages`",
        "one form: `list`/`detail` (short) or `pages` (general)",
    ),
    "a job needs pages: `list` and/or `detail`, or `pages`": (
        "no pages",
        "`list` and/or `detail`, or `pages`",
    ),
}

_TYPE_ERRORS = frozenset({"string_type", "model_type", "dict_type", "model_attributes_type"})


def _problems_from(exc: ValidationError, doc: Document) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    seen_nodes: set[Path_] = set()
    errors = exc.errors()
    resolved = [_path_of(tuple(e["loc"]), doc) for e in errors]
    # A union (`next: str | Pagination`) reports one error per branch; when one branch
    # says something specific about this node, the others' "wrong type" is noise.
    specific: set[Path_] = set()
    for e, (path, _) in zip(errors, resolved, strict=True):
        if e["type"] not in _TYPE_ERRORS:
            specific.update(path[:i] for i in range(len(path) + 1))
    for err, (path, exists) in zip(errors, resolved, strict=True):
        loc = tuple(err["loc"])
        kind = err["type"]
        last = loc[-1] if loc else ""
        if not exists and kind in _TYPE_ERRORS and path in specific:
            continue
        if kind == "extra_forbidden":
            allowed = allowed_keys(loc)
            close = difflib.get_close_matches(str(last), allowed, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                doc.problem(
                    path,
                    f"unknown key '{last}'{hint}",
                    f"one of: {', '.join(allowed)}" if allowed else "a known key",
                    key=True,
                )
            )
            continue
        if kind == "missing":
            where = f" in '{path[-1]}'" if path and isinstance(path[-1], str) else ""
            problems.append(
                doc.problem(
                    path, f"missing required key '{last}'{where}", f"'{last}: ...' here", key=True
                )
            )
            continue
        # a value of the wrong shape: one message per YAML node (union branches repeat it)
        if path in seen_nodes and not exists:
            continue
        union_branch = not exists
        seen_nodes.add(path)
        name = next((p for p in reversed(path) if isinstance(p, str)), "spec")
        msg = err["msg"]
        if kind == "value_error":
            text = msg.removeprefix("Value error, ")
            what, _, expected = text.partition("; expected ")
            known = _RULES.get(what)
            if known is not None:
                what, expected = known[0], expected or known[1]
                if isinstance(err.get("input"), str):
                    what = f"{what} {_short(err['input'])}"
            problems.append(doc.problem(path, what, expected))
            continue
        expected = _expected_from(msg)
        ctx = err.get("ctx") or {}
        if union_branch and kind in ("string_type", "model_type", "dict_type"):
            expected = "a string or a mapping"
        elif kind == "model_type" and ctx.get("class_name") == "FieldSpec":
            expected = "a CSS selector string or a mapping of sources (css, xpath, json, ...)"
        elif kind == "too_short":
            expected = f"at least {ctx.get('min_length', 1)} item(s)"
        elif kind == "too_long":
            expected = f"at most {ctx.get('max_length')} item(s)"
        problems.append(
            doc.problem(path, f"wrong value for '{name}': {_short(err.get('input'))}", expected)
        )
    return problems


def parse_document(doc: Document) -> JobSpec:
    """Validate the data against the models; every error mapped to its mark."""
    try:
        return JobSpec.model_validate(doc.data)
    except ValidationError as exc:
        problems = _problems_from(exc, doc)
        problems.sort(key=lambda p: (p.line, p.col))
        raise SpecError(problems) from None


def load_document(path: str | Path) -> tuple[JobSpec, Document]:
    """Read, compose and validate the shape of a spec file (not its meaning)."""
    doc = read_document(path)
    return parse_document(doc), doc
