"""The JSON Schema of a job spec, for editors (``framework schema``).

Generated from the models (:mod:`framework.spec.models`), then adjusted to the YAML a
person writes: the models' ``before`` validators accept shorter forms than their own
fields (a field as a bare CSS selector, source keys such as ``css:`` instead of the
internal ``sources`` list, a pagination or key as one string, a single follow rule
without a list), and the schema must accept what the loader accepts or an editor
would underline valid specs. The schema is the editor's help, not the judge:
``framework validate`` stays the one that decides (with ``file:line:col``).

The project ships the result as ``framework/spec/job.schema.json`` (package data);
the templates name it in their first line (``# yaml-language-server: $schema=...``,
understood by the YAML language server in VS Code, Neovim, Helix ...), and
``framework new`` rewrites that line to the path from the new job to the file.
A test keeps the shipped file equal to what this module generates.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

from framework.spec.models import SOURCE_KEYS, JobSpec

__all__ = ["SCHEMA_FILE", "job_schema", "schema_text", "with_schema_line"]

SCHEMA_FILE = Path(__file__).with_name("job.schema.json")
SCHEMA_ID = "https://framework.invalid/job.schema.json"  # a name, never fetched
_LINE = re.compile(r"^# yaml-language-server: \$schema=\S*[ \t]*$", re.MULTILINE)

_ONE_OR_MANY = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ]
}


def _mapping(description: str, texts: dict[str, dict[str, Any]], **rule: Any) -> dict[str, Any]:
    """A source written as a mapping of texts (``texts``: each key's extras)."""
    properties = {key: {"type": "string", **extra} for key, extra in texts.items()}
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        **rule,
        "additionalProperties": False,
    }


_SOURCES: dict[str, dict[str, Any]] = {
    "css": {**_ONE_OR_MANY, "description": "CSS selector (a list: fallbacks, in order)"},
    "xpath": {**_ONE_OR_MANY, "description": "XPath (a list: fallbacks, in order)"},
    "json": {**_ONE_OR_MANY, "description": "JSON path, on format: json pages"},
    "re": {**_ONE_OR_MANY, "description": "regex over the element's text (group 1 or value)"},
    "url": {**_ONE_OR_MANY, "description": "regex over the page URL"},
    "count": {**_ONE_OR_MANY, "description": "number of elements a selector matches"},
    "embedded": _mapping(
        "JSON or a JavaScript literal in the page (a script by selector, the assignment "
        "to a var, or a regex's group), then a JSON path",
        {"script": {}, "var": {}, "re": {}, "path": {"default": "$"}},
        anyOf=[{"required": ["script"]}, {"required": ["var"]}, {"required": ["re"]}],
    ),
    "pairs": _mapping(
        "a definition list or two-column table as one mapping: each pair element, its "
        "key and its value (default: its first and last cell)",
        {"each": {}, "key": {}, "value": {}},
        required=["each"],
    ),
    "const": {"description": "a constant value"},
}


def job_schema() -> dict[str, Any]:
    """The schema of ``job.yaml`` as written (draft 2020-12)."""
    schema = copy.deepcopy(JobSpec.model_json_schema(by_alias=True, mode="validation"))
    defs: dict[str, Any] = schema["$defs"]
    for name in ("FieldSpec", "TotalSpec"):  # a total is a field of the page
        field = defs[name]
        field["properties"].pop("sources", None)
        field["properties"] = {**_SOURCES, **field["properties"]}
    assert set(_SOURCES) == set(SOURCE_KEYS), "every source key of the models"
    defs.pop("Source", None)
    # short forms, wherever the long one may be written
    _wrap(schema, "FieldSpec", {"type": "string", "description": "a CSS selector"})
    _wrap(schema, "TotalSpec", {"type": "string", "description": "a CSS selector"})
    _wrap(schema, "Pagination", {"type": "string", "description": "selector of the next link"})
    _wrap(schema, "KeySpec", {"type": "string", "description": "the dedupe key template"})
    _wrap(schema, "WaitFor", {"type": "string", "description": "selector to wait for"})
    _wrap(schema, "Click", {"type": "string", "description": "selector to click"})
    _wrap(schema, "Scroll", {"type": "integer", "minimum": 1, "description": "times"})
    click = defs["RenderOptions"]["properties"]["click"]
    defs["RenderOptions"]["properties"]["click"] = {
        "anyOf": [click, {"type": "string"}, {"$ref": "#/$defs/Click"}],
        "default": [],
    }
    # a form field as a value template, or a list of them (forms: in crawl/forms.py)
    _wrap(schema, "FormField", {"type": "string", "description": "a value template"})
    _wrap(
        schema,
        "FormField",
        {"type": "array", "items": {"type": "string"}, "description": "one request per value"},
    )
    forms = defs["PageKind"]["properties"]["forms"]
    defs["PageKind"]["properties"]["forms"] = {
        "anyOf": [forms, {"$ref": "#/$defs/FormSpec"}],
        "default": [],
    }
    follow = defs["PageKind"]["properties"]["follow"]
    defs["PageKind"]["properties"]["follow"] = {
        "anyOf": [follow, {"$ref": "#/$defs/FollowRule"}],
        "default": [],
    }
    # a status check as one number as well as a list (`status: 403`)
    for name in ("BlockRule", "SessionExpired"):
        status = defs[name]["properties"]["status"]
        default = status.pop("default", None)
        defs[name]["properties"]["status"] = {
            "anyOf": [{"type": "integer"}, status],
            "default": default,
        }
    # `blocked:` as one rule as well as a list of them, wherever it may be written
    for node in [schema, *defs.values()]:
        blocked = node.get("properties", {}).get("blocked")
        if blocked is not None:
            node["properties"]["blocked"] = {
                "anyOf": [{"$ref": "#/$defs/BlockRule"}, blocked],
                "default": [],
            }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **{k: v for k, v in schema.items() if k != "title"},
        "title": "framework job spec (projects/<job>/job.yaml)",
    }


def _wrap(node: Any, name: str, short: dict[str, Any]) -> None:
    """Every reference to ``$defs/name`` also accepts the short form."""
    ref = f"#/$defs/{name}"
    if isinstance(node, dict):
        for key, value in list(node.items()):
            if isinstance(value, dict) and value.get("$ref") == ref and key != "anyOf":
                extra = {k: v for k, v in value.items() if k != "$ref"}
                node[key] = {"anyOf": [dict(short), {"$ref": ref}], **extra}
            else:
                _wrap(value, name, short)
        if isinstance(node.get("anyOf"), list):
            items = node["anyOf"]
            if {"$ref": ref} in items and not any(i.get("type") == short["type"] for i in items):
                items.insert(0, dict(short))
    elif isinstance(node, list):
        for value in node:
            _wrap(value, name, short)


def schema_text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(job_schema(), indent=2, ensure_ascii=False) + "\n"


def with_schema_line(text: str, target: Path, schema: Path = SCHEMA_FILE) -> str:
    """``text`` (a spec) with its ``# yaml-language-server: $schema=`` line pointing
    from ``target`` (where the spec is written) to the shipped schema file. Text
    without that line is returned as it is."""
    rel = Path(os.path.relpath(schema.resolve(), target.parent.resolve())).as_posix()
    return _LINE.sub(lambda _m: f"# yaml-language-server: $schema={rel}", text, count=1)
