"""Semantic checks after the models parse (framework.spec.validate)."""

# ruff: noqa: E501  (YAML fixtures and full problem lines read best unwrapped)

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from framework.errors import SpecError
from framework.spec import load_spec

HEAD = """\
name: cases
source_type: demo
start_urls: [http://127.0.0.1:8800/cases]
"""


def problems(tmp_path: Path, body: str) -> list[str]:
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + textwrap.dedent(body))
    try:
        load_spec(spec)
    except SpecError as exc:
        return [
            f"{p.line}:{p.col}: {p.what}" + (f"; expected {p.expected}" if p.expected else "")
            for p in exc.problems
        ]
    return []


def test_a_full_short_form_spec_is_valid(tmp_path: Path) -> None:
    assert (
        problems(
            tmp_path,
            """
        render: playwright
        list:
          each: "table.cases tr"
          follow: "a.detail::attr(href)"
          next: {param: page, max_pages: 7}
          fields: {court: "td.court::text"}
        detail:
          id: {css: "#case-number::text", required: true}
          fields:
            title: {css: "h1::text", required: true}
            filed: {css: ".filed::text", type: date, format: "%d.%m.%Y"}
            amount: {css: ".amount::text", xpath: "//span[@data-field='amount']/text()", type: number, min: 0}
            number: {re: 'Case (\\d+)', url: '/cases/(?P<value>\\d+)'}
            state: {embedded: {re: 'STATE = (\\{.*?\\});', path: "$.state"}}
            parties: {each: "table.parties tr", fields: {name: "td::text"}}
          subtabs:
            rulings: {url: "/cases/{id}/tab/rulings?court={court|slug}", format: json, each: "$.rows[*]", fields: {d: {json: "$.date", type: date}}}
            notes:
              url: "/cases/tab/notes"
              method: POST
              body: {json: {case: "{id}", meta: ["{title|lower}"]}}
              fields: {text: "p::text"}
        key: {template: "{source_type}:{court|slug}/{id}", lowercase: true}
        ship: {endpoint: "http://127.0.0.1:9000/v1/items", fallback_path: /items}
        settings: {DOWNLOAD_DELAY: 0.5}
        """,
        )
        == []
    )


def test_general_form_chain_to_any_depth_is_valid(tmp_path: Path) -> None:
    assert (
        problems(
            tmp_path,
            """
        start: categories
        pages:
          categories:
            follow: {css: "a.cat::attr(href)", to: listing}
          listing:
            each: "li.item"
            fields: {category: "h2::text"}
            follow: [{pattern: '/items/\\d+$', to: item}]
            pagination: {next: "a[rel=next]::attr(href)"}
          item:
            id: {css: ".sku::text"}
            fields: {name: "h1::text"}
            subtabs:
              stock: {url: "/stock/{category|slug}/{id}", format: json, fields: {n: {json: "$.n", type: integer}}}
          api:
            format: json
            each: "$.items[*]"
            id: {json: "$.id"}
            pagination: {param: offset, start: 0, step: 50, stop: {json: "$.more", equals: false}}
        """.replace("          api:", "          api:").replace(
                "follow: [{pattern", "follow: [{css: 'a.api::attr(href)', to: api}, {pattern"
            ),
        )
        == []
    )


def test_css_that_looks_like_xpath_gets_a_hint(tmp_path: Path) -> None:
    got = problems(tmp_path, "detail:\n  id: {css: '//h1/text()'}\n")
    assert len(got) == 1
    assert "write it under `xpath:`" in got[0]


def test_selectors_and_regexes_nested_past_the_parsers_are_located_errors(
    tmp_path: Path,
) -> None:
    """500 descendant steps or 500 nested groups (a 1 KB spec) overflow the
    recursion of cssselect and of Python's regex parser: a located error, not a
    RecursionError traceback with exit 1."""
    deep_css = "a " * 500 + "b::text"
    deep_re = "(" * 500 + "a" + ")" * 500
    got = problems(
        tmp_path,
        f"""\
        detail:
          id: {{css: "{deep_css}"}}
          fields:
            x: {{re: "{deep_re}"}}
            y: {{url: "{deep_re}"}}
        """,
    )
    assert len(got) == 3, got
    assert got[0].startswith("5:13: CSS selector 'a a a")
    assert "(1007 characters) is nested too deeply to read; expected fewer nested" in got[0]
    assert got[1].startswith("7:13: regex '(((")
    assert got[2].startswith("8:14: regex '(((")
    assert all("nested too deeply" in g for g in got)


def test_unreachable_kind_and_bad_start(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        pages:
          list: {each: tr, id: "td::text"}
          orphan: {id: "h1::text"}
        """,
    )
    assert got == [
        "7:3: page kind 'orphan' is never reached; expected `start: orphan` or a follow rule `to: orphan`"
    ]
    got = problems(tmp_path, "start: nope\npages:\n  list: {id: 'h1::text'}\n")
    assert got == ["4:8: start kind 'nope' is not a page kind; expected one of: list"]


def test_job_without_items_is_refused(tmp_path: Path) -> None:
    got = problems(tmp_path, "list: {each: tr, fields: {a: 'td::text'}}\n")
    assert any("emits no items" in p for p in got)


def test_pagination_must_stop(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        pages:
          list:
            each: tr
            id: "td::text"
            pagination: {param: page, step: 0, stop: {empty: false}}
        """,
    )
    assert "9:37: pagination step 0; expected 1 or more" in got
    assert any("this pagination never stops" in p for p in got)


def test_stop_on_empty_needs_records_and_json_stop_needs_json(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        pages:
          page:
            id: "h1::text"
            pagination: {param: p, stop: {json: "$.more"}}
        """,
    )
    assert any("a JSON stop flag on an HTML page" in p for p in got)
    assert any("`stop: empty` needs `each`" in p for p in got)


def test_templates_may_use_fields_carried_from_earlier_kinds_only(tmp_path: Path) -> None:
    body = """
        list:
          each: tr
          follow: "a::attr(href)"
          fields: {court: "td.court::text"}
        detail:
          id: "#id::text"
          subtabs:
            t: {url: "/t/{court}/{id}/{url}", fields: {x: "p::text"}}
            u: {url: "/t/{judge}", fields: {x: "p::text"}, method: POST, body: {form: {a: "{nope|slug}"}}}
        """
    got = problems(tmp_path, body)
    assert got == [
        "13:14: URL template '/t/{judge}' names unknown field 'judge'; expected one of: court, id, source_id, source_type, url",
        "13:83: body template '{nope|slug}' names unknown field 'nope'; expected one of: court, id, source_id, source_type, url",
    ]


def test_field_level_checks(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        detail:
          id: "#id::text"
          fields:
            a: {css: h1, format: "%Y"}
            b: {css: h1, type: date, format: "YYYY"}
            c: {css: h1, min: 1}
            d: {css: h1, type: number, min: 5, max: 1}
            e: {css: h1, type: integer, default: many}
            f: {css: h1, each: tr}
            g: {re: '(\\d*)'}
            h: {embedded: {re: 'x = (.*);', pathh: "$.a"}}
            i: {css: h1, replace: [{pattern: "(", to: ""}]}
            j: {css: h1, type: date, format: "%d.%Q"}
            k: {css: h1, type: datetime, format: "%d.%m.%"}
            source_id: "h2::text"
        """,
    )
    text = "\n".join(got)
    for fragment in (
        "`format` on a field of type string",
        "date format 'YYYY' has no % directive",
        "date format '%d.%Q': 'Q' is a bad directive in format '%d.%Q'",
        "date format '%d.%m.%': stray % in format '%d.%m.%'",
        "`min` on a field of type string",
        "max 1 is below min 5",
        "default 'many' is not a integer",
        "`each` without `fields`",
        "matches the empty string",
        "unknown key 'pathh' in `embedded`",
        "invalid regex '('",
        "field name 'source_id' is reserved",
    ):
        assert fragment in text, fragment


def test_json_pages_take_json_paths_and_html_pages_do_not(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        pages:
          api:
            format: json
            each: "table tr"
            id: "h1::text"
            fields:
              b: {count: "li"}
          html:
            id: {json: "$.id"}
        """.replace("            id: {json", "            id: {json").replace(
            "          html:", "          html:"
        )
        + "start: api\n",
    )
    text = "\n".join(got)
    assert "invalid JSON path 'table tr'" in text
    assert "a bare string is a CSS selector, but this page is `format: json`" in text
    assert "a `count` selector on a `format: json` page" in text
    assert "a `json` path on an HTML page" in text


def test_urls_domains_settings_and_ship(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\nstart_urls: ['http:///nohost', 'mailto:a@b']\n"
        "allowed_domains: ['http://example.org']\n"
        "detail: {id: 'h1::text'}\nsettings: {download_delay: 1}\n"
        "ship: {endpoint: 'ftp://x', fallback_path: items}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    got = [(p.line, p.col, p.what.split(" ")[0]) for p in info.value.problems]
    assert got == [
        (3, 14, "start"),
        (3, 32, "start"),
        (4, 19, "allowed"),
        (6, 12, "unknown"),
        (7, 18, "ship"),
        (7, 44, "fallback"),
    ]


def test_allowed_domains_are_host_names_and_hold_the_start_urls(tmp_path: Path) -> None:
    """`*`, `*.example.org` and `.` passed validation and then refused the job's own
    start URLs at run time; so did a start URL on a host outside allowed_domains."""
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\n"
        "start_urls: ['http://127.0.0.1:8800/cases', 'https://shop.example.org/a']\n"
        "allowed_domains: ['*', '*.example.org', '.', 'sub.example.org']\n"
        "detail: {id: 'h1::text'}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    got = [(p.line, p.col, p.what, p.expected) for p in info.value.problems]
    assert got == [
        (
            3,
            14,
            "start URL host '127.0.0.1' is not in allowed_domains: the crawl would refuse it",
            "one of sub.example.org (or a subdomain), or add '127.0.0.1' to them",
        ),
        (
            3,
            45,
            "start URL host 'shop.example.org' is not in allowed_domains: the crawl would "
            "refuse it",
            "one of sub.example.org (or a subdomain), or add 'shop.example.org' to them",
        ),
        (4, 19, "allowed domain '*' is not a host name", "example.org"),
        (
            4,
            24,
            "allowed domain '*.example.org' is not a host name",
            "example.org (its subdomains are allowed with it)",
        ),
        (4, 41, "allowed domain '.' is not a host name", "example.org"),
    ]
    # a domain allows its subdomains; an IP address and a leading dot are host names
    spec.write_text(
        "name: cases\nsource_type: demo\n"
        "start_urls: ['http://127.0.0.1:8800/cases', 'https://shop.example.org/a']\n"
        "allowed_domains: ['127.0.0.1', '.example.org']\n"
        "detail: {id: 'h1::text'}\n"
    )
    load_spec(spec)


def test_kind_names_and_subtab_names(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        pages:
          Detail:
            id: "h1::text"
            fields: {t: "p::text"}
            subtabs:
              t: {url: "/x/{id}", fields: {a: "p::text"}}
        """,
    )
    text = "\n".join(got)
    assert "page kind name 'Detail'" in text
    assert "sub-tab 't' has the name of a field" in text


def test_spec_settings_are_an_allow_list(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        detail: {id: "h1::text"}
        settings:
          DOWNLOAD_DELAYY: 1
          CONCURRENT_REQUESTS_PER_DOMAIN: 2
          FRAMEWORK_MAX_REQUESTS: 10
          SOME_PLUGIN_OPTION: true
          ITEM_PIPELINES: {"os.system": 1}
          FRAMEWORK_FRESH: true
        """,
    )
    hint = "put it in the project's Scrapy settings module or pass `-s {}=...`"
    assert got == [
        "7:3: unknown spec setting 'DOWNLOAD_DELAYY' (did you mean 'DOWNLOAD_DELAY'?);"
        " expected 'DOWNLOAD_DELAY'",
        "10:3: unknown spec setting 'SOME_PLUGIN_OPTION'; expected a spec setting"
        f" (docs/spec-reference.md); {hint.format('SOME_PLUGIN_OPTION')} on the command line"
        " (both are code you trust)",
        "11:3: setting 'ITEM_PIPELINES' is not allowed in a spec (a spec is data: settings that"
        " load code, open ports or write files are not); expected a spec setting"
        f" (docs/spec-reference.md); {hint.format('ITEM_PIPELINES')} on the command line"
        " (both are code you trust)",
        "12:3: setting 'FRAMEWORK_FRESH' is not allowed in a spec (a spec is data: settings"
        " that load code, open ports or write files are not); expected a spec setting"
        f" (docs/spec-reference.md); {hint.format('FRAMEWORK_FRESH')} on the command line"
        " (both are code you trust)",
    ]


def test_spec_setting_values_are_type_checked(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        detail: {id: "h1::text"}
        settings:
          DOWNLOAD_DELAY: "0.5"
          CONCURRENT_REQUESTS: 2.5
          ROBOTSTXT_OBEY: "yes"
          DOWNLOAD_MAXSIZE: 0
          FRAMEWORK_STOP_ON_429: 1
          FRAMEWORK_RETRY_AFTER_CAP: true
          DEFAULT_REQUEST_HEADERS: {Accept: [text/html]}
          USER_AGENT: ""
          FRAMEWORK_MAX_ATTEMPTS: 0
          FRAMEWORK_EXTRACT_TIMEOUT: 0
          DOWNLOAD_TIMEOUT: .inf
          AUTOTHROTTLE_START_DELAY: .nan
        """,
    )
    assert got == [
        "7:19: wrong value for setting 'DOWNLOAD_DELAY': '0.5'; expected a number >= 0",
        "8:24: wrong value for setting 'CONCURRENT_REQUESTS': 2.5; expected an integer >= 1",
        "9:19: wrong value for setting 'ROBOTSTXT_OBEY': 'yes'; expected true or false",
        "10:21: wrong value for setting 'DOWNLOAD_MAXSIZE': 0; expected an integer >= 1",
        "11:26: wrong value for setting 'FRAMEWORK_STOP_ON_429': 1; expected true or false",
        "12:30: wrong value for setting 'FRAMEWORK_RETRY_AFTER_CAP': True; expected a number >= 0",
        "13:28: wrong value for setting 'DEFAULT_REQUEST_HEADERS': {'Accept': ['text/html']};"
        " expected a mapping of header names to texts",
        "14:15: wrong value for setting 'USER_AGENT': ''; expected a text",
        "15:27: wrong value for setting 'FRAMEWORK_MAX_ATTEMPTS': 0; expected an integer >= 1",
        "16:30: wrong value for setting 'FRAMEWORK_EXTRACT_TIMEOUT': 0; expected a number > 0",
        # YAML's infinity and NaN are floats: a timeout of infinity fails every request
        "17:21: wrong value for setting 'DOWNLOAD_TIMEOUT': inf; expected a number >= 0.001",
        "18:29: wrong value for setting 'AUTOTHROTTLE_START_DELAY': nan; expected a number >= 0",
    ]
    # a user agent goes into a header: one line, as DEFAULT_REQUEST_HEADERS' values
    got = problems(
        tmp_path, 'detail: {id: "h1::text"}\nsettings: {USER_AGENT: "a\\r\\nX-Injected: 1"}\n'
    )
    assert got == [
        "5:24: wrong value for setting 'USER_AGENT': 'a\\r\\nX-Injected: 1'; expected a text on one line"
    ]


def test_allowed_spec_settings_pass(tmp_path: Path) -> None:
    assert (
        problems(
            tmp_path,
            """
            detail: {id: "h1::text"}
            settings:
              DOWNLOAD_DELAY: 1
              RANDOMIZE_DOWNLOAD_DELAY: false
              AUTOTHROTTLE_ENABLED: true
              AUTOTHROTTLE_TARGET_CONCURRENCY: 2.0
              CONCURRENT_REQUESTS: 4
              DOWNLOAD_TIMEOUT: 30
              DEFAULT_REQUEST_HEADERS: {Accept-Language: id}
              USER_AGENT: "examplebot/1.0 (+https://example.org/bot)"
              ROBOTSTXT_OBEY: false
              DOWNLOAD_MAXSIZE: 1048576
              COOKIES_ENABLED: false
              REDIRECT_MAX_TIMES: 3
              FRAMEWORK_MAX_REQUESTS: 100
              FRAMEWORK_RETRY_AFTER_CAP: 60
            """,
        )
        == []
    )
