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
from framework.settings import FRAMEWORK_SETTINGS, SETTINGS, default
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


# Every FRAMEWORK_* name in the code, setting or environment variable, is on the
# settings page. Names that are neither, and why:
NOT_SETTINGS = {
    "FRAMEWORK_SETTINGS": "framework.settings: the table's rows every job gets, a Python name",
}
_NAME = re.compile(r"\bFRAMEWORK_[A-Z0-9]+(?:_[A-Z0-9]+)*\b")


def framework_names(*roots: Path) -> dict[str, str]:
    """Every ``FRAMEWORK_*`` name in the Python files under ``roots`` (code, docstrings
    and comments alike), with the first file that names it."""
    found: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for name in _NAME.findall(path.read_text(encoding="utf-8")):
                shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                found.setdefault(name, str(shown))
    return found


def undocumented(names: dict[str, str], page: str) -> list[str]:
    """The names not on ``page`` as a row of one of its tables (`` | `NAME` | ``)."""
    return sorted(
        f"{name} (in {where})"
        for name, where in names.items()
        if name not in NOT_SETTINGS and f"| `{name}` |" not in page
    )


def test_every_framework_name_the_code_reads_is_in_the_settings_reference() -> None:
    page = (REPO / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    names = framework_names(REPO / "framework", REPO / "plugins")
    assert "FRAMEWORK_CHROMIUM" in names  # the scan reads the plugins...
    assert "FRAMEWORK_HOME" in names  # ... and the core
    assert undocumented(names, page) == [], (
        "add the setting to framework/settings.py or the variable to "
        f"ENVIRONMENT_MEANINGS in framework/docs_meanings.py, then `{docs_gen.REGENERATE}`"
    )
    # and the page documents no variable the code no longer names
    gone = sorted(set(docs_gen.ENVIRONMENT_MEANINGS) - set(names))
    assert gone == [], f"documented environment variables no code reads: {gone}"


def test_a_framework_name_missing_from_the_reference_fails(tmp_path: Path) -> None:
    code = tmp_path / "new.py"
    code.write_text(
        'import os\nos.environ.get("FRAMEWORK_BRAND_NEW")\nFRAMEWORK_SETTINGS = {}\n'
        "# FRAMEWORK_HOME: documented already\n",
        encoding="utf-8",
    )
    names = framework_names(tmp_path)
    assert sorted(names) == ["FRAMEWORK_BRAND_NEW", "FRAMEWORK_HOME", "FRAMEWORK_SETTINGS"]
    assert undocumented(names, docs_gen.render_settings()) == [f"FRAMEWORK_BRAND_NEW (in {code})"]
    env = {**docs_gen.ENVIRONMENT_MEANINGS, "FRAMEWORK_BRAND_NEW": "a new variable"}
    assert undocumented(names, docs_gen.render_settings(environment=env)) == []


def test_the_table_defaults_its_readers_keep_are_theirs() -> None:
    """The rows whose readers default themselves (framework/settings.py says which) give
    the same default as the reader, so the reference says what a run does."""
    from framework.crawl import limits
    from framework.workspace import leases

    assert default("FRAMEWORK_RESPONSES_BUDGET_MB") == limits.RESPONSES_BUDGET_MB
    assert default("FRAMEWORK_LEASE_SECONDS") == leases.LEASE_SECONDS
    for name in (
        "FRAMEWORK_STORE_RESPONSES",
        "FRAMEWORK_PROGRESS",
        "FRAMEWORK_METRICS_PORT",
        "FRAMEWORK_ALLOW_PRIVATE",
        "FRAMEWORK_ROOT",
        "FRAMEWORK_WORKSPACES",
        "FRAMEWORK_SPECS_PACKAGE",
        "FRAMEWORK_CHROMIUM",
    ):
        assert default(name) is None, name  # unset unless the operator sets it
    assert default("FRAMEWORK_LEASE_BATCH") == 0  # the claimer's "or" default
    # none of them is a spec's to set, nor in every job's settings
    for name in ("FRAMEWORK_CHROMIUM", "FRAMEWORK_ALLOW_PRIVATE", "FRAMEWORK_ROOT"):
        assert not SETTINGS[name].spec
        assert not SETTINGS[name].job
        assert name not in FRAMEWORK_SETTINGS


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


def test_the_readme_and_the_home_page_lead_with_tutorial_guides_reference_operations() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    home = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    for text, prefix in ((section, "docs/"), (home, "")):
        targets = ["tutorial.md", "guides/index.md", "spec-reference.md", "operations.md"]
        at = [text.find(f"]({prefix}{target})") for target in targets]
        assert -1 not in at, dict(zip(targets, at, strict=True))
        assert at == sorted(at), (
            f"{prefix or 'docs/index.md'}: {dict(zip(targets, at, strict=True))}"
        )
    assert "plugins/dashboard/" in readme.split("\n## Layout\n", 1)[1]


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
