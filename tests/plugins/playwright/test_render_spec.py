"""`render:` and `browser:` in specs: what renders, the options' checks, and the refusal
(file:line:col, what to install) when the renderer plugin or Chromium is missing.

None of these tests needs a browser: a missing one is simulated with $FRAMEWORK_CHROMIUM
pointing at nothing and with no candidate path; the plugin's absence by an empty
entry point lookup.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import framework.plugins as plugins
from framework.errors import SpecError, UsageError
from framework.spec import load_spec
from framework.spec.render import RenderOptions, rendered_kinds
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli

HEAD = """\
name: js
source_type: demo
start_urls: ["http://127.0.0.1:1/list"]
"""


def write(tmp_path: Path, body: str, head: str = HEAD) -> Path:
    path = tmp_path / "projects" / "js" / "job.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + textwrap.dedent(body), encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    try:
        load_spec(path)
    except SpecError as exc:
        return [str(p) for p in exc.problems]
    return []


@pytest.fixture
def chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in executable as $FRAMEWORK_CHROMIUM: validation only looks for it."""
    exe = tmp_path / "bin" / "chromium"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setenv("FRAMEWORK_CHROMIUM", str(exe))
    return exe


SHORT = """\
render: playwright
list:
  each: "tr"
  follow: "a::attr(href)"
  browser:
    wait_until: networkidle
    wait_for: "table.cases"
    scroll: 5
detail:
  id: "#id::text"
  browser:
    wait_for: {selector: "//h1", timeout: 2.5}
    click: "button.more"
  subtabs:
    rulings: {url: "/r/{id}", format: json, each: "$.rows[*]", fields: {n: {json: "$.n"}}}
    hearings:
      url: "/h/{id}"
      each: "tr"
      fields: {d: "td::text"}
      browser:
        click: [{selector: "a.tab", wait_for: "#panel table"}, {selector: "button.more", times: 5}]
    documents: {url: "/d/{id}", render: http, each: "li", fields: {n: "a::text"}}
"""


def test_render_per_job_kind_and_subtab_with_browser_options(tmp_path, chromium):
    spec = load_spec(write(tmp_path, SHORT))
    kinds = rendered_kinds(spec)
    # JSON pages are never rendered unless they say so; `render: http` opts a tab out
    assert sorted(kinds) == ["detail", "detail.hearings", "list"]
    assert kinds["list"].wait_until == "networkidle"
    assert kinds["list"].scroll is not None
    assert kinds["list"].scroll.times == 5
    assert kinds["detail"].wait_for is not None
    assert (kinds["detail"].wait_for.selector, kinds["detail"].wait_for.timeout) == ("//h1", 2.5)
    assert [c.selector for c in kinds["detail"].click] == ["button.more"]
    clicks = kinds["detail.hearings"].click
    assert [(c.selector, c.times) for c in clicks] == [("a.tab", 1), ("button.more", 5)]
    assert clicks[0].wait_for is not None
    assert clicks[0].wait_for.selector == "#panel table"


def test_a_job_that_renders_nothing_needs_no_renderer(tmp_path, monkeypatch):
    monkeypatch.setattr(plugins, "_load", lambda name: None)  # no plugin at all
    path = write(tmp_path, 'detail:\n  id: "#id::text"\n  fields: {t: "h1::text"}\n')
    assert problems(path) == []
    assert rendered_kinds(load_spec(path)) == {}


def test_a_kind_renders_alone_when_the_job_does_not(tmp_path, chromium):
    body = (
        'list:\n  each: tr\n  follow: "a::attr(href)"\n  render: playwright\n'
        'detail:\n  id: "#id::text"\n'
    )
    kinds = rendered_kinds(load_spec(write(tmp_path, body)))
    assert kinds == {"list": RenderOptions()}


def test_without_the_plugin_validate_refuses_at_the_render_key(tmp_path, monkeypatch):
    monkeypatch.setattr(plugins, "_load", lambda name: None)
    path = write(tmp_path, SHORT)
    found = problems(path)
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}:4:9: render: playwright needs the playwright plugin")
    assert "pip install -e plugins/playwright" in found[0]


def test_without_a_browser_validate_refuses_every_render_key(tmp_path, monkeypatch):
    import framework_playwright.browser as browser

    monkeypatch.setenv("FRAMEWORK_CHROMIUM", "")
    monkeypatch.setattr(browser, "CANDIDATES", (str(tmp_path / "no-chromium"),))
    body = (
        'list:\n  each: tr\n  follow: "a::attr(href)"\n  render: playwright\n'
        'detail:\n  id: "#id::text"\n  render: playwright\n'
    )
    path = write(tmp_path, body)
    found = problems(path)
    assert [p.split(": ", 1)[0] for p in found] == [f"{path}:7:11", f"{path}:10:11"]
    assert all("needs Chromium and none was found" in p for p in found)
    assert all("apt-get install chromium" in p for p in found)


def test_a_wrong_framework_chromium_is_refused_not_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAMEWORK_CHROMIUM", str(tmp_path / "nope"))
    found = problems(write(tmp_path, SHORT))
    assert len(found) == 1
    assert f"$FRAMEWORK_CHROMIUM names {tmp_path / 'nope'}, which is not an executable" in found[0]


@pytest.mark.process
def test_framework_validate_refuses_through_the_real_cli(tmp_path):
    path = write(tmp_path, SHORT)
    env = {**os.environ, "FRAMEWORK_CHROMIUM": str(tmp_path / "nope")}
    r = procs.run(
        [*CLI, "validate", str(path)], capture_output=True, text=True, env=env, check=False
    )
    assert r.returncode == 2, r.stderr
    assert f"{path}:4:9: render: playwright needs Chromium" in r.stderr
    assert "apt-get install chromium" in r.stderr


@pytest.mark.parametrize(
    ("body", "where", "what"),
    [
        (
            'detail:\n  id: "#id::text"\n  browser: {wait_for: "#id"}\n',
            "6:3",
            "`browser` options on a page that is not rendered",
        ),
        (
            'render: playwright\ndetail:\n  id: "#id::text"\n  browser: {wait_for: "#id::text"}\n',
            "7:23",
            "selects text or an attribute, not an element",
        ),
        (
            'render: playwright\ndetail:\n  id: "#id::text"\n'
            '  browser: {click: [{selector: "a[", times: 2}]}\n',
            "7:32",
            "invalid CSS selector 'a['",
        ),
        (
            'render: playwright\ndetail:\n  id: "#id::text"\n  browser: {wait_for: "//h1["}\n',
            "7:23",
            "invalid XPath",
        ),
        (
            "detail:\n  id: {json: $.id}\n  format: json\n  render: playwright\n",
            "7:11",
            "a `format: json` page rendered in a browser",
        ),
    ],
)
def test_browser_option_problems_are_located(tmp_path, chromium, body, where, what):
    path = write(tmp_path, body)
    found = problems(path)
    assert any(p.startswith(f"{path}:{where}: ") and what in p for p in found), found


@pytest.mark.parametrize(
    "browser",
    [
        "{wait_until: soon}",
        "{wait_for: {selector: '#x', timeout: 0}}",
        "{click: {selector: a, times: 0}}",
        "{scroll: {times: 5, pause: -1}}",
        "{scrol: 5}",
    ],
)
def test_browser_option_shapes_are_checked(tmp_path, chromium, browser):
    path = write(
        tmp_path, f'render: playwright\ndetail:\n  id: "#id::text"\n  browser: {browser}\n'
    )
    found = problems(path)
    assert found
    assert all(p.startswith(f"{path}:7:") for p in found), found


def test_load_renderer_says_what_to_install(monkeypatch):
    monkeypatch.setattr(plugins, "_load", lambda name: None)
    with pytest.raises(UsageError, match="install it: pip install -e plugins/playwright"):
        plugins.load_renderer("playwright", {})


@pytest.mark.process
def test_with_the_plugin_and_a_browser_validate_says_ok(tmp_path, chromium):
    path = write(tmp_path, SHORT)
    r = run_cli("validate", str(path))
    assert r.returncode == 0, r.stderr
    assert f"ok {path}" in r.stdout


def test_a_sitemap_in_a_rendering_job_is_fetched_over_http(tmp_path, chromium):
    body = """\
    render: playwright
    start: sitemaps
    pages:
      sitemaps:
        format: sitemap
        follow: [{pattern: "/book/", to: book}]
      book:
        id: ".id::text"
        fields: {title: "h1::text"}
    """
    path = write(tmp_path, body)
    assert problems(path) == []
    # a browser would wrap the XML (or its gzip bytes) in a page of its own
    assert sorted(rendered_kinds(load_spec(path))) == ["book"]
    # saying otherwise is refused where it is said
    said = write(
        tmp_path, body.replace("format: sitemap\n", "format: sitemap\n        render: playwright\n")
    )
    assert [p for p in problems(said) if "a sitemap is not rendered" in p], problems(said)
