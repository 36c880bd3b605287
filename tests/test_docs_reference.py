"""The generated reference (docs/reference/*.md) equals a fresh render of the code, and
a key or setting the code gains without a meaning stops the render
(framework/docs_gen.py). Also: the version the package reports is the one
pyproject.toml and CHANGELOG.md give."""

from __future__ import annotations

import copy
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from framework import docs_gen
from framework.cli import CORE_COMMANDS, main
from framework.settings import FRAMEWORK_SETTINGS
from framework.spec.schema import job_schema
from tests.paths import REPO


def test_the_committed_reference_is_current() -> None:
    stale = docs_gen.stale_pages(REPO)
    assert stale == [], f"stale generated docs {stale}: run `{docs_gen.REGENERATE}`"


def test_a_key_added_to_the_models_without_a_meaning_fails() -> None:
    schema = copy.deepcopy(job_schema())
    schema["$defs"]["FieldSpec"]["properties"]["brand_new"] = {"type": "boolean"}
    schema["properties"]["also_new"] = {"type": "string"}
    with pytest.raises(docs_gen.Undocumented) as caught:
        docs_gen.render_spec(schema)
    assert sorted(caught.value.problems) == [
        "spec key FieldSpec.brand_new: no meaning in SPEC_MEANINGS",
        "spec key JobSpec.also_new: no meaning in SPEC_MEANINGS",
    ]


def test_a_key_with_a_description_in_the_models_needs_no_other_meaning() -> None:
    schema = copy.deepcopy(job_schema())
    schema["$defs"]["FieldSpec"]["properties"]["brand_new"] = {
        "type": "boolean",
        "description": "said by the model itself",
    }
    assert "| `brand_new` | `true` or `false` | none | said by the model itself |" in (
        docs_gen.render_spec(schema)
    )


def test_a_meaning_of_a_removed_key_or_a_new_object_without_a_title_fails() -> None:
    schema = copy.deepcopy(job_schema())
    del schema["$defs"]["DriftSpec"]["properties"]["min_records"]
    schema["$defs"]["Fresh"] = {"type": "object", "properties": {"x": {"description": "x"}}}
    with pytest.raises(docs_gen.Undocumented) as caught:
        docs_gen.render_spec(schema)
    assert sorted(caught.value.problems) == [
        "spec key DriftSpec.min_records: documented, but the models have no such key",
        "spec object Fresh: no section title in SPEC_TITLES",
    ]


def test_a_setting_without_a_meaning_fails() -> None:
    more = {**FRAMEWORK_SETTINGS, "FRAMEWORK_BRAND_NEW": 1}
    with pytest.raises(docs_gen.Undocumented) as caught:
        docs_gen.render_settings(framework_settings=more)
    assert caught.value.problems == ["setting FRAMEWORK_BRAND_NEW: no meaning in SETTING_MEANINGS"]


def test_the_spec_page_says_types_defaults_and_allowed_values() -> None:
    page = docs_gen.render_spec()
    assert "| `max_attempts` | integer 1-100 | `3` |" in page
    assert "| `name` | text | required |" in page
    assert "| `render` | `http` or `playwright` | `http` |" in page
    assert "| `per_second` | number > 0 | none |" in page


def test_every_anchor_of_the_spec_page_names_one_of_its_headings() -> None:
    page = docs_gen.render_spec()
    headings = {docs_gen._slug(h) for h in re.findall(r"^## (.+)$", page, re.M)}
    anchors = set(re.findall(r"\]\(#([\w-]+)\)", page))
    assert anchors, "the page links its sections"
    assert anchors <= headings, anchors - headings


def test_the_cli_page_has_every_core_command_and_its_options() -> None:
    page = docs_gen.render_cli()
    for name in CORE_COMMANDS:
        assert f"\n## framework {name}\n" in page
    assert "--max-requests" in page
    assert "Usage: framework crawl [OPTIONS] JOB" in page


def test_the_check_command_names_stale_pages_and_the_write_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert docs_gen.main(["--root", str(tmp_path), "--check"]) == 1
    assert "stale: docs/reference/spec.md" in capsys.readouterr().err
    assert docs_gen.main(["--root", str(tmp_path)]) == 0
    assert docs_gen.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "docs/reference/cli.md").write_text("edited by hand\n", encoding="utf-8")
    assert docs_gen.main(["--root", str(tmp_path), "--check"]) == 1
    assert "stale: docs/reference/cli.md" in capsys.readouterr().err


def test_the_version_is_one_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    import framework

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject["project"]["version"]
    # the installed metadata is pyproject's as of the last install (make reinstalls
    # when pyproject.toml changes)
    assert version("framework") == declared == framework.__version__
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"framework, version {declared}"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released, "CHANGELOG.md has no released version"
    assert released[0] == declared, "the newest release in CHANGELOG.md"


# Words of how the project was built, not of what it does: a user doc speaks of the
# product (its history is in git and CHANGELOG.md). Another project's issue, cited by
# its name ("scrapy issues 4106"), is a source, not our process.
_PROCESS = re.compile(
    r"(?P<who>[\w./-]+)?\s*\b(?P<what>issues? ?#?\d+|the lead\b|"
    r"(?:this|first|second|third|fourth) session\b|new-user probe)",
    re.IGNORECASE,
)
_OTHER_PROJECTS = ("scrapy", "crawlee", "rmax/", "apify/")


def process_words(text: str) -> list[str]:
    found = []
    for match in _PROCESS.finditer(text):
        who = (match.group("who") or "").lower()
        if match.group("what").lower().startswith("issue") and who.startswith(_OTHER_PROJECTS):
            continue
        found.append(match.group(0).strip())
    return found


def test_no_user_doc_speaks_of_issues_or_sessions() -> None:
    docs = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = {
        str(path.relative_to(REPO)): words
        for path in docs
        if (words := process_words(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_process_words_are_found_and_citations_are_not() -> None:
    assert process_words("Group commit (issue 15): the outcomes") == ["issue 15"]
    assert process_words("bench_spider.py --issue15 --only x") == ["--issue15"]
    assert process_words("re-measured in a fourth session") == ["a fourth session"]
    assert process_words("scrapy issues 4106 and 2399; rmax/scrapy-redis issues 177") == []
    assert process_words("a login session expires") == []
