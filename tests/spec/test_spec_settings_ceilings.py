"""The ceilings of a spec's settings (framework.spec.checks.settings), through
``load_spec`` as ``framework validate`` runs it: over one, the problem is at the value's
``file:line:col`` and says how the operator goes past it; at one, the spec passes. The
operator's own channels (the project's settings module, ``-s``) go past every ceiling."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from framework import scrapy_settings
from framework.crawl.spider import spider_class
from framework.errors import SpecError
from framework.spec import load_spec
from framework.spec.checks.settings import CEILINGS, UNCAPPED
from framework.spec.validate import spec_settings
from tests.paths import REPO

HEAD = """\
name: cases
source_type: demo
start_urls: [http://127.0.0.1:8800/cases]
detail: {id: "h1::text"}
"""
NUMBERS = ("int", "number", "positive")


def problems(tmp_path: Path, settings: str) -> list[str]:
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + settings)
    try:
        load_spec(spec)
    except SpecError as exc:
        return [f"{p.line}:{p.col}: {p.what}; expected {p.expected}" for p in exc.problems]
    return []


def _value(name: str, factor: float) -> int | float:
    kind, _low = spec_settings()[name]
    value = CEILINGS[name].value * factor
    return int(value) if kind == "int" or float(value).is_integer() else value


def test_every_number_a_spec_may_set_has_a_ceiling_or_a_reason() -> None:
    allowed = spec_settings()
    numbers = {name for name, (kind, _) in allowed.items() if kind in NUMBERS}
    # a setting added to the allow-list (or to FRAMEWORK_SETTINGS) without a ceiling
    # would be one more limit a shared spec can lift
    assert sorted(numbers - set(CEILINGS) - set(UNCAPPED)) == []
    # and no ceiling names a setting a spec cannot set (a typo would cap nothing)
    assert sorted(set(CEILINGS) - numbers) == []
    assert sorted(set(UNCAPPED) - numbers) == []


@pytest.mark.parametrize("name", sorted(CEILINGS))
def test_a_setting_over_its_ceiling_is_refused_at_its_value(tmp_path: Path, name: str) -> None:
    value = _value(name, 10)
    got = problems(tmp_path, f"settings:\n  {name}: {value}\n")
    col = len(f"  {name}: ") + 1
    assert got == [
        f"6:{col}: setting '{name}': {value!r} is over the most a spec may set; expected at "
        f"most {CEILINGS[name].said()}; past that only the operator: pass `-s {name}=...` on "
        "the command line or set it in the project's Scrapy settings module"
    ]


def test_every_setting_at_its_ceiling_passes(tmp_path: Path) -> None:
    lines = "".join(f"  {name}: {_value(name, 1)}\n" for name in sorted(CEILINGS))
    assert problems(tmp_path, "settings:\n" + lines) == []


def test_the_values_that_lifted_every_limit_are_refused(tmp_path: Path) -> None:
    got = problems(
        tmp_path,
        "settings:\n"
        "  FRAMEWORK_EXTRACT_TIMEOUT: 100000000\n"
        "  DOWNLOAD_MAXSIZE: 1000000000000000\n"
        "  FRAMEWORK_MAX_MATCHES: 10000000000\n"
        "  FRAMEWORK_MAX_MATCH_CHARS: 10000000000\n"
        "  REDIRECT_MAX_TIMES: 1000000000\n"
        "  CONCURRENT_REQUESTS: 100000\n",
    )
    assert [g.split(" is over")[0] for g in got] == [
        "6:30: setting 'FRAMEWORK_EXTRACT_TIMEOUT': 100000000",
        "7:21: setting 'DOWNLOAD_MAXSIZE': 1000000000000000",
        "8:26: setting 'FRAMEWORK_MAX_MATCHES': 10000000000",
        "9:30: setting 'FRAMEWORK_MAX_MATCH_CHARS': 10000000000",
        "10:23: setting 'REDIRECT_MAX_TIMES': 1000000000",
        "11:24: setting 'CONCURRENT_REQUESTS': 100000",
    ]
    assert "expected at most 10 seconds of CPU per page;" in got[0]


def test_the_floors_still_hold_under_the_ceilings(tmp_path: Path) -> None:
    # nothing refused before is let through now: a zero cap, a negative delay, infinity
    got = problems(
        tmp_path,
        "settings:\n"
        "  DOWNLOAD_MAXSIZE: 0\n"
        "  DOWNLOAD_DELAY: -1\n"
        "  FRAMEWORK_EXTRACT_TIMEOUT: .inf\n",
    )
    assert [g.split(";")[0] for g in got] == [
        "6:21: wrong value for setting 'DOWNLOAD_MAXSIZE': 0",
        "7:19: wrong value for setting 'DOWNLOAD_DELAY': -1",
        "8:30: wrong value for setting 'FRAMEWORK_EXTRACT_TIMEOUT': inf",
    ]


def test_the_reference_gives_every_ceiling() -> None:
    text = (REPO / "docs" / "spec-reference.md").read_text(encoding="utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    for name, ceiling in CEILINGS.items():
        row = next((r for r in rows if re.search(rf"`{name}`", r)), None)
        assert row is not None, f"{name} has no row in docs/spec-reference.md"
        number = (
            f"{ceiling.value:,.0f}" if float(ceiling.value).is_integer() else f"{ceiling.value:g}"
        )
        assert number in row, (name, number, row)


def test_every_default_of_the_table_is_one_a_spec_could_set() -> None:
    # the table is the one place of each default: a default under its own floor or
    # over its own ceiling would be refused in a spec that only restates it
    from framework.settings import SCRAPYS, SETTINGS

    for row in SETTINGS.values():
        if row.default is SCRAPYS or row.default is None or row.kind not in NUMBERS:
            continue
        if row.low is not None:
            assert row.default >= row.low, row.name
        if row.ceiling is not None:
            assert row.default <= row.ceiling.value, row.name


def _crawler_settings(
    tmp_path: Path, spec_text: str, project: Mapping[str, Any], cmdline: Mapping[str, Any]
) -> Settings:
    """The settings a crawl of the spec runs with under ``scrapy crawl``: the project's
    settings module, the job's spider, the command line, and the runner's settings
    merged in once more (Scrapy's CrawlerProcess.crawl does, at their own priorities)."""
    path = tmp_path / "job.yaml"
    path.write_text(spec_text)
    runner = Settings()
    runner.setmodule(scrapy_settings, priority="project")
    runner.setdict(dict(project), priority="project")
    runner.setdict(dict(cmdline), priority="cmdline")
    crawler = runner.copy()
    spider_class(load_spec(path), path, tmp_path / "var").update_settings(crawler)
    crawler.update(runner)
    return crawler


@pytest.mark.parametrize("name", sorted(CEILINGS))
def test_the_operators_settings_module_goes_past_every_ceiling(tmp_path: Path, name: str) -> None:
    past = _value(name, 10)
    # a limit the spec leaves out: the module's value, past the ceiling, is taken
    got = _crawler_settings(tmp_path, HEAD, {name: past}, {})
    assert got[name] == past
    # the spec's own value (within the ceiling) is the job's: a spec may lower a limit
    within = _value(name, 1)
    got = _crawler_settings(tmp_path, HEAD + f"settings:\n  {name}: {within}\n", {name: past}, {})
    assert got[name] == within
    # and the command line (-s) goes past the ceiling over both
    got = _crawler_settings(
        tmp_path, HEAD + f"settings:\n  {name}: {within}\n", {name: past}, {name: past * 2}
    )
    assert got[name] == past * 2


def test_without_the_operator_the_frameworks_defaults_hold(tmp_path: Path) -> None:
    from framework.settings import SCRAPYS, SETTINGS, UNDER_PROJECT

    got = _crawler_settings(tmp_path, HEAD, {}, {})
    for name in sorted(UNDER_PROJECT - {"USER_AGENT"}):
        assert got[name] == SETTINGS[name].default, name
        assert SETTINGS[name].default is not SCRAPYS
    assert got["USER_AGENT"].endswith("(declarative Scrapy job 'cases')")
    # the job's machinery stays the job's whatever the module says
    got = _crawler_settings(tmp_path, HEAD, {"SCHEDULER": "elsewhere.Scheduler"}, {})
    assert got["SCHEDULER"] == "framework.crawl.scheduler.MemoryScheduler"


def test_max_attempts_said_in_the_spec_is_the_spec_s(tmp_path: Path) -> None:
    module = {"FRAMEWORK_MAX_ATTEMPTS": 500}
    assert _crawler_settings(tmp_path, HEAD, module, {})["FRAMEWORK_MAX_ATTEMPTS"] == 500
    said = HEAD + "max_attempts: 5\n"
    assert _crawler_settings(tmp_path, said, module, {})["FRAMEWORK_MAX_ATTEMPTS"] == 5
