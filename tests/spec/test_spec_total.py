"""`total:` of a list kind: a field source read as an integer, with a `tolerance`;
`validate` refuses it where nothing is listed, and a bad source or tolerance, at its
line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.spec import load_spec
from tests.spec.test_spec_validate import HEAD, problems


def test_a_total_on_a_list_is_an_integer_field_with_a_tolerance(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        HEAD
        + """list:
  each: "li.job"
  follow: "a::attr(href)"
  next: "a[rel=next]::attr(href)"
  total: {css: ".count::text", re: 'of ([\\d,]+)', tolerance: 2%}
detail:
  id: ".id::text"
"""
    )
    total = load_spec(spec).page_kinds()["list"].total
    assert total is not None
    assert [s.kind for s in total.sources] == ["css", "re"]
    assert (total.type.value, total.tolerance, total.allowed(2000)) == ("integer", "2%", 40)


def test_a_bare_total_is_a_css_selector_with_no_tolerance(tmp_path: Path) -> None:
    assert (
        problems(
            tmp_path,
            'list: {each: li, follow: "a::attr(href)", total: ".n::text"}\n'
            'detail: {id: ".id::text"}\n',
        )
        == []
    )


def test_a_total_on_a_kind_that_lists_nothing_is_refused_at_its_place(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        """
        pages:
          list:
            follow: {css: "a::attr(href)", to: item}
          item:
            id: ".id::text"
            total: ".count::text"
        """,
    )
    assert got == [
        "10:12: `total` on a kind that lists nothing (no `each`, no `follow`); expected "
        "`total` on the list kind whose pages say how many records there are"
    ]


@pytest.mark.parametrize(
    ("total", "what"),
    [
        ("{css: '.n::text', tolerance: -1}", "tolerance is a count (0 or more) or a share"),
        ("{css: '.n::text', tolerance: lots}", "tolerance is a count (0 or more) or a share"),
        ("{css: '.n::[text'}", "invalid CSS selector"),
        ("{re: '(a+)+'}", "backtrack"),
    ],
)
def test_a_bad_total_is_refused(tmp_path: Path, total: str, what: str) -> None:
    got = problems(
        tmp_path,
        f'list: {{each: li, follow: "a::attr(href)", total: {total}}}\n'
        'detail: {id: ".id::text"}\n',
    )
    assert len(got) == 1, got
    assert got[0].startswith("4:")
    assert what in got[0]
