"""Loading specs: YAML -> JobSpec with file:line:col problems, and the bad-spec corpus."""

from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.errors import SpecError
from framework.spec import load_spec
from framework.spec.load import MAX_BYTES, load_document, read_document, read_text
from framework.spec.models import JobSpec
from tests.paths import TESTS

BAD = TESTS / "specs" / "bad"
_EXPECT = re.compile(rb"^# expect (\d+):(\d+) (.+)$", re.M)


def _cases() -> list[tuple[Path, int, int, str]]:
    cases = []
    for path in sorted(BAD.rglob("*.yaml")):
        m = _EXPECT.search(path.read_bytes())
        if m is None:  # a helper file of a multi-file case (dup-projects/alpha)
            continue
        cases.append((path, int(m.group(1)), int(m.group(2)), m.group(3).decode()))
    return cases


CASES = _cases()


def test_corpus_covers_the_issue_list() -> None:
    names = {p.stem for p, *_ in CASES} | {p.parent.parent.parent.name for p, *_ in CASES}
    for needed in (
        "yaml-syntax", "empty", "list-root", "scalar-root", "unknown-key", "misspelled-key",
        "missing-key", "wrong-type", "invalid-url", "invalid-css", "invalid-xpath",
        "invalid-regex", "invalid-jsonpath", "url-template-unknown-field",
        "key-template-unknown-field", "dup-projects", "non-utf8", "duplicate-key", "alias-bomb",
        "settings-telnet", "settings-extensions", "settings-log-file", "settings-feeds",
        "settings-import-path", "tag-on-mapping", "tag-on-sequence", "url-userinfo",
        "url-secret-query",
    ):  # fmt: skip
        assert needed in names, needed


@pytest.mark.parametrize(
    ("path", "line", "col", "fragment"),
    [c for c in CASES if "dup-projects" not in c[0].parts],
    ids=[c[0].stem for c in CASES if "dup-projects" not in c[0].parts],
)
def test_bad_spec_is_refused_at_its_position(
    path: Path, line: int, col: int, fragment: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    lines = str(info.value).splitlines()
    wanted = f"{path}:{line}:{col}: "
    hits = [x for x in lines if x.startswith(wanted) and fragment in x]
    assert hits, f"no problem at {wanted} with {fragment!r} in:\n" + "\n".join(lines)
    for problem in info.value.problems:
        assert problem.file == str(path)
        assert problem.line >= 1
        assert problem.col >= 1


def test_alias_bomb_is_refused_fast_and_small() -> None:
    # The one time bound the issue demands: generous, and memory too.
    tracemalloc.start()
    began = time.perf_counter()
    with pytest.raises(SpecError, match="alias bomb"):
        load_spec(BAD / "alias-bomb.yaml")
    elapsed = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 20 * 1024 * 1024


def test_every_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\nstart_urls: [http://x/]\nmax_attempts: lots\n"
        "detail:\n  id: '#id::text'\n  fields:\n    a: {css: h1, tpye: date}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert [(p.line, p.col) for p in info.value.problems] == [(4, 15), (8, 18)]
    assert "did you mean 'type'" in str(info.value)


def test_semantic_problems_are_all_reported(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\nstart_urls: [notaurl]\n"
        "detail:\n  id: 'h1['\n  fields:\n    a: {xpath: '//a['}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert [(p.line, p.col) for p in info.value.problems] == [(3, 14), (5, 7), (7, 16)]


def test_valid_spec_loads_into_the_models(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\nstart_urls: [http://127.0.0.1/cases]\n"
        "list: {each: tr, follow: 'a::attr(href)', next: 'a.next::attr(href)'}\n"
        "detail:\n  id: {css: '#id::text', required: true}\n"
        "  fields:\n    amount: {css: ['.a::text', '.b::text'], type: number}\n"
    )
    loaded = load_spec(spec)
    assert isinstance(loaded, JobSpec)
    amount = loaded.page_kinds()["detail"].fields["amount"]
    assert [(s.kind, s.expr) for s in amount.sources] == [("css", ".a::text"), ("css", ".b::text")]
    assert loaded.start_kind() == "list"


def test_marks_are_recorded_for_keys_and_values(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: cases\nlist:\n  each: 'tr'\n  fields:\n    - x\n")
    doc = read_document(spec)
    assert doc.keys[("list", "each")] == (3, 3)
    assert doc.values[("list", "each")] == (3, 9)
    assert doc.values[("list", "fields", 0)] == (5, 7)


def test_merge_keys_are_honoured_and_explicit_keys_win(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\nstart_urls: [http://127.0.0.1/]\n"
        "_base: &num {type: number, min: 0}\n"
        "detail:\n  id: '#id::text'\n  fields:\n"
        "    a: {<<: *num, css: '.a::text'}\n    b: {<<: *num, css: '.b::text', min: 5}\n"
    )
    # `_base` is not a key of the language: it must still be refused, merges or not
    with pytest.raises(SpecError, match="unknown key '_base'"):
        load_document(spec)
    data = read_document(spec).data
    assert data["detail"]["fields"]["a"] == {"type": "number", "min": 0, "css": ".a::text"}
    assert data["detail"]["fields"]["b"]["min"] == 5


def test_keys_are_read_as_text_not_yaml_booleans() -> None:
    doc = read_text("on: 1\nno: 2\n2024: 3\n")
    assert doc.data == {"on": 1, "no": 2, "2024": 3}


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_bytes(b"\xef\xbb\xbfname: cases\n")
    assert read_document(spec).data == {"name": "cases"}


def test_size_cap(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("# " + "x" * MAX_BYTES + "\n")
    with pytest.raises(SpecError, match=r"job.yaml:1:1: spec file is \d+ bytes; expected at most"):
        load_spec(spec)


def test_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read spec file"):
        load_spec(tmp_path / "nope.yaml")


def test_deep_nesting_is_refused_not_crashing(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecError, match="too deep"):
        load_spec(spec)


def test_many_small_aliases_over_budget_are_refused() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * 500) + "]\n"
    with pytest.raises(SpecError, match="more than 200 YAML aliases"):
        read_text(text, "t.yaml")


def test_unknown_yaml_tag_is_located() -> None:
    with pytest.raises(SpecError, match=r"t.yaml:2:8: YAML tag '!python/object:os.system'"):
        read_text("name: x\nother: !python/object:os.system ls\n", "t.yaml")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: !!python/object/apply:os.system\n  args: [ls]\n", "1:4"),  # on a mapping
        ("a: !!python/object/apply:os.system [ls]\n", "1:4"),  # on a sequence
        ("!!python/name:os.system a: 1\n", "1:1"),  # on a key
        ("!!python/object:x\na: 1\n", "1:1"),  # on the root
        ("a: 1\n<<: !!python/object:x {b: 1}\n", "2:5"),  # on a merge source
        ("%TAG !p! tag:yaml.org,2002:python/\n---\na: !p!object/apply:os.system [x]\n", "3:4"),
        ("a: !<tag:yaml.org,2002:python/object/apply:os.system> {b: 1}\n", "1:4"),  # verbatim
        ("a: !!set {x, y}\n", "1:4"),  # a safe tag, but not plain data
        ("a: !!binary aGk=\n", "1:4"),
        ("a: !custom {b: 1}\n", "1:4"),
    ],
)
def test_every_tag_that_is_not_plain_data_is_refused(text: str, where: str) -> None:
    with pytest.raises(SpecError) as info:
        read_text(text, "t.yaml")
    assert str(info.value).startswith(f"t.yaml:{where}: YAML tag "), str(info.value)
    assert "is not allowed" in str(info.value)


def test_plain_core_tags_stay_allowed() -> None:
    doc = read_text("a: !!str 1\nb: !!map {x: !!int '2'}\nc: !!seq [!!null '']\n<<: {d: 1}\n")
    assert doc.data == {"a": "1", "b": {"x": 2}, "c": [None], "d": 1}


def test_shape_messages_say_what_was_expected(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: a\nsource_type: b\nstart_urls: []\ndetail:\n  id: [1]\n  fields: {a: 5}\n"
        "  subtabs: {t: {url: /x, method: PUT, fields: {a: p}}}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    got = [str(p).split(": ", 1)[1] for p in info.value.problems]
    assert got == [
        "wrong value for 'start_urls': []; expected at least 1 item(s)",
        "wrong value for 'id': [1]; expected a CSS selector string or a mapping of sources"
        " (css, xpath, json, ...)",
        "wrong value for 'a': 5; expected a CSS selector string or a mapping of sources"
        " (css, xpath, json, ...)",
        "wrong value for 'method': 'PUT'; expected 'GET' or 'POST'",
    ]


def test_did_you_mean_reaches_nested_and_aliased_keys(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: a\nsource_type: b\nstart_urls: [http://x/]\n"
        "list: {each: tr, follow: 'a::attr(href)', next: {parm: page}}\n"
        "detail:\n  id: h1::text\n  fields: {d: {css: x, type: date, fromat: '%Y'}}\n"
        "  subtabs: {t: {url: /x, method: POST, body: {jsn: {}}, fields: {a: p}}}\n"
        "ship: {endpont: 'http://x/'}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    got = [(p.line, p.col, p.what) for p in info.value.problems]
    # one problem per mistake: the `str` branch of `next: str | Pagination` stays quiet
    assert got == [
        (4, 50, "unknown key 'parm' (did you mean 'param'?)"),
        (7, 36, "unknown key 'fromat' (did you mean 'format'?)"),
        (8, 47, "unknown key 'jsn' (did you mean 'json'?)"),
        (9, 8, "unknown key 'endpont' (did you mean 'endpoint'?)"),
    ]


def test_public_door_exports_what_it_lists() -> None:
    import framework.spec as door

    assert sorted(door.__all__) == sorted(set(door.__all__))
    for name in door.__all__:
        assert getattr(door, name) is not None, name
    assert callable(door.load_spec)


def test_control_characters_and_several_documents_are_located() -> None:
    with pytest.raises(SpecError, match=r"t.yaml:2:9: control character U\+0000 is not allowed"):
        read_text("name: a\nsource: \x00\n", "t.yaml")
    with pytest.raises(SpecError, match=r"t.yaml:2:1: YAML syntax error: .*single document"):
        read_text("name: a\n---\nname: b\n", "t.yaml")
    with pytest.raises(SpecError, match=r"t.yaml:3:1: YAML syntax error"):
        read_text("name: a\nlist:\n\teach: tr\n", "t.yaml")


@settings(max_examples=200)
@given(st.text(alphabet="ab: -[]{}&*!|>'\"#\n\t\x00%@`,?", max_size=60))
def test_any_text_reads_or_is_a_located_spec_error(text: str) -> None:
    problems = []
    try:
        read_text(text, "f.yaml")
    except SpecError as exc:
        problems = exc.problems
        assert problems, "a SpecError always carries its problems"
    for p in problems:
        assert p.file == "f.yaml"
        assert p.line >= 1
        assert p.col >= 1


def test_model_rules_read_as_what_and_expected(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: a\nsource_type: b\nstart_urls: [http://x/]\n"
        "detail: {id: h1, fields: {g: {fields: {a: b}}, h: {type: date}},"
        " subtabs: {t: {url: /x, body: {form: {}}}}}\n"
        "list: {next: {}}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    got = [(p.line, p.col, p.what, p.expected) for p in info.value.problems]
    assert got == [
        (4, 30, "a nested group without `each`", "`each:` saying which elements are its rows"),
        (
            4,
            51,
            "a field with no source",
            "one of css, xpath, json, re, url, embedded, count, const (or a default)",
        ),
        (4, 79, "a body on a GET sub-tab", "`method: POST`"),
        (
            5,
            14,
            "pagination with none or both of `next` and `param`",
            "exactly one of `next` (a link) or `param` (a page number or offset)",
        ),
    ]
