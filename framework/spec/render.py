"""What a spec says about pages rendered in a browser, and the checks of it.

Owns the ``browser:`` options of a page kind or sub-tab that has ``render: playwright``
(:class:`RenderOptions`: ``wait_until``, ``wait_for``, ``click``, ``scroll``), which row
kinds render (:func:`rendered_kinds`), and the located problems of those keys
(:func:`render_problems`), including "no renderer can run here" (the plugin or the
browser is missing), asked of the renderer plugin through :mod:`framework.plugins`.

The models here are imported by :mod:`framework.spec.models`; this module must not
import that one at run time (it would be circular) and must not import any plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from cssselect import SelectorError
from lxml import etree
from pydantic import BaseModel, ConfigDict, Field, model_validator

from framework.extract.fields import compile_css, compile_xpath, looks_like_xpath

if TYPE_CHECKING:
    from framework.errors import SpecProblem
    from framework.spec.load import Document, Path_
    from framework.spec.models import JobSpec

__all__ = [
    "Click",
    "RenderOptions",
    "Scroll",
    "WaitFor",
    "browser_selector",
    "render_problems",
    "rendered_kinds",
]

RENDERER = "playwright"  # the one `render:` value that needs a renderer plugin


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class WaitFor(_Strict):
    """An element that must be in the page before it is read; written as a bare
    selector (CSS, or XPath when it starts with ``/`` or ``(``) or as a mapping."""

    selector: str
    timeout: float = Field(default=10.0, gt=0, le=600)  # seconds; past it: error `timeout`

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        return {"selector": data} if isinstance(data, str) else data


class Click(_Strict):
    """Click an element (a tab, a "load more" button) up to ``times`` times.

    The first click waits for the element (an error `timeout` when it never comes);
    later clicks stop quietly once the element is gone or hidden. After each click the
    page must change: ``wait_for`` appears, or else the document grows or changes.
    """

    selector: str
    times: int = Field(default=1, ge=1, le=100)
    wait_for: WaitFor | None = None

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        return {"selector": data} if isinstance(data, str) else data


class Scroll(_Strict):
    """Scroll to the bottom up to ``times`` times, for lists that grow on scroll; stop
    early when the page has not grown ``pause`` seconds after a scroll (the end)."""

    times: int = Field(ge=1, le=1000)
    pause: float = Field(default=2.0, gt=0, le=60)

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        return {"times": data} if isinstance(data, int) and not isinstance(data, bool) else data


class RenderOptions(_Strict):
    """``browser:`` on a page kind or sub-tab that renders. In this order: navigate until
    ``wait_until``, wait for ``wait_for``, the clicks as written, then the scrolling;
    the fields are then read from the page's DOM as it is at that moment."""

    wait_until: Literal["load", "domcontentloaded", "networkidle", "commit"] = "load"
    wait_for: WaitFor | None = None
    click: tuple[Click, ...] = ()
    scroll: Scroll | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_click(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("click"), str | dict):
            return {**data, "click": [data["click"]]}
        return data


def browser_selector(selector: str) -> str:
    """The Playwright form of a spec selector (the spec's xpath-or-css rule)."""
    return f"xpath={selector}" if looks_like_xpath(selector) else f"css={selector}"


def _plan(spec: JobSpec) -> list[tuple[str, Path_, str, Any]]:
    """(row kind, its YAML path, its effective render, its browser options) of every
    page kind and sub-tab. A kind without ``render`` takes the job's, except JSON pages
    (a browser would wrap the JSON in HTML), which render only when they say so."""
    paths = spec.kind_paths()
    out: list[tuple[str, Path_, str, Any]] = []
    job = spec.render.value
    for name, kind in spec.page_kinds().items():
        path = paths[name]
        render = _effective(kind.render, kind.format.value, job)
        out.append((name, path, render, kind.browser))
        for tname, tab in kind.subtabs.items():
            render = _effective(tab.render, tab.format.value, job)
            out.append((f"{name}.{tname}", (*path, "subtabs", tname), render, tab.browser))
    return out


def _effective(own: Any, fmt: str, job: str) -> str:
    if own is not None:
        return str(own.value)
    # JSON answers and sitemaps are data, not pages: a browser would wrap them (or a
    # sitemap's gzip bytes) in a page of its own, so they are fetched over HTTP unless
    # the kind says otherwise
    return "http" if fmt in ("json", "sitemap") else job


def rendered_kinds(spec: JobSpec) -> dict[str, RenderOptions]:
    """Row kind -> its browser options, for every kind rendered by ``playwright``
    (empty when the job renders nothing: the spider then needs no renderer)."""
    return {
        kind: options or RenderOptions()
        for kind, _, render, options in _plan(spec)
        if render == RENDERER
    }


def render_problems(spec: JobSpec, doc: Document) -> list[SpecProblem]:
    """Located problems of ``render``/``browser`` keys, and, when something renders,
    whether a renderer can run here (the plugin is installed, it finds its browser)."""
    from framework.plugins import renderer_unavailable

    problems: list[SpecProblem] = []
    causes: dict[Path_, None] = {}  # the `render` keys that make a kind render, in order
    for _kind, path, render, options in _plan(spec):
        raw = _raw(doc, path)
        if render == RENDERER:
            causes[(*path, "render") if "render" in raw else ("render",)] = None
        if options is not None:
            if render != RENDERER:
                problems.append(
                    doc.problem(
                        (*path, "browser"),
                        "`browser` options on a page that is not rendered",
                        "`render: playwright` on this page (or the job)",
                        key=True,
                    )
                )
            problems.extend(_option_problems(doc, (*path, "browser"), options))
        if raw.get("render") == RENDERER and raw.get("format") == "json":
            problems.append(
                doc.problem(
                    (*path, "render"),
                    "a `format: json` page rendered in a browser",
                    "`render: http` for JSON pages",
                )
            )
    if causes:
        why = renderer_unavailable(RENDERER, spec.settings)
        if why is not None:
            problems.extend(doc.problem(p, why) for p in causes)
    return problems


def _option_problems(doc: Document, path: Path_, options: RenderOptions) -> list[SpecProblem]:
    found: list[tuple[Path_, str]] = []
    raw = _raw(doc, path)
    if options.wait_for is not None:
        found.append((_selector_path(raw, path, "wait_for"), options.wait_for.selector))
    raw_click = raw.get("click")
    for i, click in enumerate(options.click):
        cpath: Path_ = (*path, "click", i) if isinstance(raw_click, list) else (*path, "click")
        craw = raw_click[i] if isinstance(raw_click, list) else raw_click
        found.append((cpath if isinstance(craw, str) else (*cpath, "selector"), click.selector))
        if click.wait_for is not None:
            sub = craw if isinstance(craw, dict) else {}
            found.append((_selector_path(sub, cpath, "wait_for"), click.wait_for.selector))
    out = []
    for where, selector in found:
        what = _selector_problem(selector)
        if what is not None:
            out.append(doc.problem(where, what, "a CSS selector or an XPath of an element"))
    return out


def _selector_path(raw: dict[str, Any], path: Path_, key: str) -> Path_:
    return (*path, key) if isinstance(raw.get(key), str) else (*path, key, "selector")


def _selector_problem(selector: str) -> str | None:
    if not selector.strip():
        return "an empty selector"
    if looks_like_xpath(selector):
        try:
            compile_xpath(selector)
        except (etree.XPathError, ValueError) as exc:
            return f"invalid XPath {selector!r}: {exc}"
        return None
    if "::" in selector:  # Scrapy's ::text/::attr() are not elements a browser can wait for
        return f"{selector!r} selects text or an attribute, not an element"
    try:
        compile_css(selector)
    except (SelectorError, ValueError) as exc:
        return f"invalid CSS selector {selector!r}: {exc}"
    return None


def _raw(doc: Document, path: Path_) -> dict[str, Any]:
    node: Any = doc.data
    for part in path:
        in_dict = isinstance(node, dict) and part in node
        if not in_dict and not (isinstance(node, list) and isinstance(part, int)):
            return {}
        if not in_dict and not 0 <= int(part) < len(node):
            return {}
        node = node[part]
    return node if isinstance(node, dict) else {}
