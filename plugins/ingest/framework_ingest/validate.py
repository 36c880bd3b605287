"""Request bodies to validated items: JSON parsing (400) and item validation (422).

This module owns the rules a body must meet before it reaches storage, including the
ones JSON Schema cannot say (``dedupe_key == source_type:source_id``, text that the
databases can store). It knows nothing of storage or of HTTP framing.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from framework_ingest.db import format_time
from framework_ingest.models import BatchItemIn, ItemIn
from framework_ingest.problems import ProblemError, problem


class ItemInvalid(Exception):
    """One item failed validation; ``problem`` is its problem (422; 413 for a batch
    element over the item limit), ``dedupe_key`` the key it claimed (when it named a
    string one)."""

    def __init__(self, problem_body: dict[str, Any], dedupe_key: str | None = None) -> None:
        super().__init__(problem_body.get("detail"))
        self.problem = problem_body
        self.dedupe_key = dedupe_key


# How deep ``data`` may nest (an object or array inside another is one level more).
# Deeper values could be stored but not read back: serializing them on a route's stack
# runs out of recursion, so every write route refuses them the same way (422).
MAX_DEPTH = 64


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)
_WHITESPACE = re.compile(r"[ \t\n\r]*")


# A JSON value's tokens as the nesting scan needs them: strings (skipped whole, so a
# bracket inside one is text), brackets, and the colon that ends an object's key.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


@dataclass(frozen=True)
class TooDeep:
    """A value the parser ran out of recursion on: nested far deeper than
    :data:`MAX_DEPTH` (the parser's limit is near a thousand levels), so never stored.
    ``field`` is the key of the item under which the nesting is (``""`` for the value
    itself): :func:`prepare` answers it as that field's 422, as it does a value it
    could parse and then found too deep."""

    field: str


@dataclass(frozen=True)
class TooLarge:
    """A batch element whose JSON text is over the item limit (``--max-item-bytes``),
    the limit the single route applies to its whole body: :func:`prepare` answers it as
    that element's 413. ``dedupe_key`` is the key it names (for its result), if any."""

    size: int
    limit: int
    dedupe_key: str | None = None


def _element_size(text: str, start: int, end: int, limit: int) -> int:
    """The UTF-8 size of ``text[start:end]``, exact once it may be over ``limit`` (a
    character is at most four bytes: shorter text is counted by its characters)."""
    chars = end - start
    if chars * 4 <= limit:
        return chars
    return len(text[start:end].encode("utf-8", "surrogatepass"))


def _too_large(element: Any, size: int, limit: int) -> TooLarge:
    key = element.get("dedupe_key") if isinstance(element, dict) else None
    return TooLarge(size, limit, key if isinstance(key, str) and storable(key) else None)


def _too_deep_at(text: str, start: int) -> tuple[TooDeep, int]:
    """The value that starts at ``start`` read as a :class:`TooDeep`, and where it ends:
    a scan without recursion (the value is as deep as a hostile client made it)."""
    depth = 0
    key = field = None
    last: str | None = None
    for m in _TOKENS.finditer(text, start):
        part = m.group()
        if part in "[{":
            depth += 1
            if depth > MAX_DEPTH + 1 and field is None:
                field = key if key is not None else ""
        elif part in "]}":
            depth -= 1
            if depth == 0:
                return TooDeep(field or ""), m.end()
        elif part == ":" and depth == 1 and last is not None:
            key = last  # the item's own key whose value comes next
        last = json.loads(part) if part.startswith('"') else None
    raise json.JSONDecodeError("Unterminated value", text, start)


def _malformed(exc: Exception) -> ProblemError:
    detail = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
    return ProblemError(400, "malformed-json", f"the body is not valid JSON: {detail}")


def _text(body: bytes) -> str:
    # What json.loads does with bytes: UTF-8, or UTF-16/32 told by the first bytes.
    try:
        return body.decode(json.detect_encoding(body), "surrogatepass")
    except UnicodeDecodeError as exc:
        raise _malformed(exc) from exc


def parse_json(body: bytes) -> Any:
    """The body as JSON, or a 400 problem (bad UTF-8, bad syntax, NaN, too deep)."""
    if not body.strip():
        raise ProblemError(400, "malformed-json", "the body is empty; expected JSON")
    try:
        return json.loads(body, parse_constant=_no_constants)
    except RecursionError:
        text = _text(body)
        start = _WHITESPACE.match(text).end()  # type: ignore[union-attr]
        try:
            value, _ = _too_deep_at(text, start)
        except ValueError as exc:
            raise _malformed(exc) from exc
        return value
    except ValueError as exc:
        raise _malformed(exc) from exc


def parse_batch(body: bytes, max_batch: int, max_item: int | None = None) -> Any:
    """A batch body: its elements when it is an array, else the value (the caller
    answers 422). An array is decoded one element at a time, so an array of more than
    ``max_batch`` elements is refused (413) after ``max_batch + 1`` of them, never
    decoded whole: a 16 MiB array of empty objects would take seconds and hundreds of
    megabytes, and hold the interpreter lock all along. An element whose JSON text is
    over ``max_item`` bytes (UTF-8) comes back as a :class:`TooLarge`: the single
    route refuses such an item too."""
    if not body.strip():
        raise ProblemError(400, "malformed-json", "the body is empty; expected JSON")
    text = _text(body)
    pos = _WHITESPACE.match(text).end()  # type: ignore[union-attr]
    if not text.startswith("[", pos):
        return parse_json(body)
    elements: list[Any] = []
    try:
        pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
        if text.startswith("]", pos):
            pos += 1
        else:
            while True:
                start = pos
                try:
                    element, pos = _DECODER.raw_decode(text, pos)
                except RecursionError:
                    # this element alone is refused (its 422); its neighbours go on
                    element, pos = _too_deep_at(text, pos)
                if max_item is not None:
                    size = _element_size(text, start, pos, max_item)
                    if size > max_item:  # this element alone is refused (its 413)
                        element = _too_large(element, size, max_item)
                elements.append(element)
                if len(elements) > max_batch:
                    raise ProblemError(
                        413,
                        "batch-too-large",
                        f"more than {max_batch} items; at most {max_batch} per batch",
                    )
                pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
                if text.startswith("]", pos):
                    pos += 1
                    break
                if not text.startswith(",", pos):
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
                pos = _WHITESPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
        if _WHITESPACE.match(text, pos).end() != len(text):  # type: ignore[union-attr]
            raise json.JSONDecodeError("Extra data", text, pos)
    except ValueError as exc:
        raise _malformed(exc) from exc
    return elements


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests containers more than ``limit`` levels (no recursion:
    the value may be as deep as the parser allowed)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        children = (
            current.values()
            if isinstance(current, dict)
            else current
            if isinstance(current, list)
            else ()
        )
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def too_deep_field(obj: Any) -> str | None:
    """The member of a parsed body (``""``: the body itself) that nests more than
    :data:`MAX_DEPTH` levels, itself the first, as ``data`` may in an item; None when
    none does. For bodies that are not items (a cursor), bounded as items are."""
    if isinstance(obj, TooDeep):
        return obj.field
    if isinstance(obj, dict):
        for key, value in obj.items():
            if too_deep(value):
                return str(key)
        return None
    if isinstance(obj, list) and too_deep(obj, MAX_DEPTH + 1):
        return ""
    return None


def nesting_problem(field: str) -> ProblemError:
    """The 422 of a value nested too deep, as every route answers it."""
    message = f"nests deeper than {MAX_DEPTH} levels"
    return ProblemError(
        422, "validation", f"{field or 'body'}: {message}", [{"field": field, "message": message}]
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    """A valid item with the values storage binds."""

    item: ItemIn
    scraped_at: str
    data_text: str
    idempotency_key: str | None

    def fingerprint(self) -> str:
        """Identifies the payload under an idempotency key (whitespace and key order
        do not count; the idempotency key itself is not part of the payload). An item
        without ``url`` has the fingerprint it had before ``url`` existed, so keys
        stored then still answer their replays."""
        payload = {
            "dedupe_key": self.item.dedupe_key,
            "source_type": self.item.source_type,
            "source_id": self.item.source_id,
            "content_hash": self.item.content_hash,
            "scraped_at": self.scraped_at,
            "data": self.item.data,
        }
        if self.item.url is not None:
            payload["url"] = self.item.url
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _invalid(errors: list[dict[str, str]], obj: Any) -> ItemInvalid:
    detail = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors)
    key = obj.get("dedupe_key") if isinstance(obj, dict) else None
    return ItemInvalid(
        problem(422, "validation", detail, errors),
        key if isinstance(key, str) and storable(key) else None,
    )


def prepare(obj: Any, *, batch: bool = False, idempotency_key: str | None = None) -> Prepared:
    """Validate one decoded item; raise :class:`ItemInvalid` naming the offending fields.

    Anything that would fail at storage or on the way back out (a time out of range
    in UTC, nesting deeper than :data:`MAX_DEPTH`) is refused here, as this item's 422;
    a batch element over the item limit (:class:`TooLarge`) as its 413."""
    if isinstance(obj, TooLarge):
        detail = f"this item is {obj.size} bytes of JSON; at most {obj.limit} per item"
        raise ItemInvalid(
            problem(413, "too-large", detail, [{"field": "", "message": detail}]),
            obj.dedupe_key,
        )
    message = f"nests deeper than {MAX_DEPTH} levels"
    if isinstance(obj, TooDeep):
        raise _invalid([{"field": obj.field, "message": message}], None)
    if isinstance(obj, dict) and too_deep(obj.get("data")):
        raise _invalid([{"field": "data", "message": message}], obj)
    model = BatchItemIn if batch else ItemIn
    try:
        item = model.model_validate(obj)
    except ValidationError as exc:
        raise _invalid(
            [
                {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
                for err in exc.errors(include_url=False, include_input=False)
            ],
            obj,
        ) from None
    errors: list[dict[str, str]] = []
    for name in ("source_type", "source_id", "content_hash", "dedupe_key"):
        value: str = getattr(item, name)
        if not storable(value):
            errors.append({"field": name, "message": "contains an unpaired surrogate"})
    if not errors and item.dedupe_key != f"{item.source_type}:{item.source_id}":
        errors.append({"field": "dedupe_key", "message": "must be '{source_type}:{source_id}'"})
    try:
        data_text = json.dumps(
            item.data, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except ValueError:  # 1e999 parses to inf, which JSON cannot carry back out
        data_text = ""
        errors.append({"field": "data", "message": "holds a number out of range"})
    if not storable(data_text):
        errors.append({"field": "data", "message": "contains an unpaired surrogate"})
    scraped_at = ""
    try:
        scraped_at = format_time(item.scraped_at)
    except OverflowError:  # 0001-01-01T00:00:00+00:01 is before year 1 in UTC
        errors.append({"field": "scraped_at", "message": "out of range once converted to UTC"})
    if errors:
        raise _invalid(errors, obj)
    if isinstance(item, BatchItemIn):
        idempotency_key = item.idempotency_key
    return Prepared(item, scraped_at, data_text, idempotency_key)


def storable(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: a lone surrogate (JSON's ``\\ud800`` escape
    can carry one) does not, and neither backend could store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
