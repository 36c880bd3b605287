"""Found-nothing warnings (framework.crawl.findings) and what a crawl does with them:
said once and counted, a crawl that stores nothing exits 4 unless the spec expects it;
storing responses can be turned off and has a budget."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from framework.crawl.findings import Findings, filled
from framework.workspace import Workspace
from tests.fixtures.crawl import events

EXIT_OK, EXIT_USAGE, EXIT_HALTED = 0, 2, 4
JOB_API = "fixture-api"


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, name: str, **data: Any) -> None:
        self.events.append({"event": name, **data})


def test_filled_values() -> None:
    assert [filled(v) for v in (None, "", [], {})] == [False] * 4
    assert [filled(v) for v in (0, False, "x", [None], {"a": 1})] == [True] * 5


def test_a_finding_is_said_once_and_counted_with_a_few_urls(caplog) -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.findings"))
    with caplog.at_level(logging.WARNING, "test.findings"):
        for i in range(1000):
            found.page(
                "list",
                f"http://h/{i}",
                emits=True,
                each=True,
                values=[],
                dropped=0,
                end_of_pages=False,
            )
    assert len(rec.events) == 1
    assert rec.events[0]["what"] == "each_empty"
    assert rec.events[0]["url"] == "http://h/0"
    assert len(caplog.records) == 1
    (summary,) = found.warnings()
    assert summary["count"] == 1000
    assert summary["examples"] == ["http://h/0", "http://h/1", "http://h/2"]


def test_the_expected_end_of_a_list_and_pages_that_dropped_records() -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.findings"))
    found.page("list", "u1", emits=True, each=True, values=[], dropped=0, end_of_pages=True)
    found.page("list", "u2", emits=True, each=True, values=[], dropped=3, end_of_pages=False)
    assert [e["what"] for e in rec.events] == ["page_all_dropped"]


def test_empty_fields_and_kinds_at_the_end_with_fill_counts() -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.findings"))
    for i in range(5):
        values = [{"title": f"t{i}", "court": None, "tags": []}]
        found.page(
            "detail", f"d{i}", emits=True, each=False, values=values, dropped=0, end_of_pages=False
        )
    found.page("other", "o1", emits=True, each=False, values=[], dropped=1, end_of_pages=False)
    found.page(
        "list", "l1", emits=False, each=True, values=[{"carry": "x"}], dropped=0, end_of_pages=False
    )
    found.finish(["detail", "other"])
    got = {(e["what"], e["kind"], e.get("field")): e for e in rec.events}
    assert set(got) == {
        ("field_empty", "detail", "court"),
        ("field_empty", "detail", "tags"),
        ("kind_empty", "other", None),
    }
    assert got[("field_empty", "detail", "court")]["count"] == 5
    assert got[("field_empty", "detail", "court")]["examples"] == ["d0", "d1", "d2"]
    assert found.fill() == {
        "detail": {"pages": 5, "records": 5, "fields": {"court": 0, "tags": 0, "title": 5}},
        "other": {"pages": 1, "records": 0, "fields": {}},
    }


def test_a_sub_tab_s_empty_fields_and_rowless_tabs_are_said_at_the_end(caplog) -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.findings"))
    with caplog.at_level(logging.WARNING, "test.findings"):
        for i in range(4):  # rows whose `room` never matched; one case has no hearing
            rows = [{"date": "2024-01-02", "room": None}] * (i % 2)
            found.tab("detail.hearings", f"h{i}", rows, each=True)
        found.tab("detail.notes", "n0", {"text": ""}, each=False)  # one mapping per page
        found.tab("detail.rulings", "r0", [], each=True)
        found.tab("detail.rulings", "r1", [], each=True)
        found.finish([])
    got = {(e["what"], e["kind"], e.get("field")): e for e in rec.events}
    assert set(got) == {
        ("field_empty", "detail.hearings", "room"),
        ("field_empty", "detail.notes", "text"),
        ("kind_empty", "detail.rulings", None),
    }
    assert got[("field_empty", "detail.hearings", "room")]["count"] == 2  # its rows
    assert got[("field_empty", "detail.hearings", "room")]["examples"] == ["h0", "h1", "h2"]
    assert got[("kind_empty", "detail.rulings", None)]["count"] == 2  # its pages
    assert "field 'room' of detail.hearings is empty in every record this run (2 records)" in (
        caplog.text
    )
    assert found.fill() == {}  # fill rates are of items: a tab's rows stay out


def test_a_follow_rule_that_never_finds_a_link_is_said_at_the_end(caplog) -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.findings"))
    page = {"emits": False, "each": True, "values": [{}], "dropped": 0, "end_of_pages": False}
    with caplog.at_level(logging.WARNING, "test.findings"):
        found.page("list", "l1", **page, follows={"detail": 0, "court": 2})
        found.page("list", "l2", **page, follows={"detail": 0, "court": 0})
        found.page("list", "l3", **page)  # read no rule (past max_depth): not counted
        found.page("courts", "c1", **page, follows={"detail": 0})
        found.page("courts", "c2", **page, follows={"detail": 1})
        found.finish([])
    assert rec.events == [
        {
            "event": "found_nothing",
            "what": "follow_empty",
            "kind": "list",
            "detail": "to detail",
            "count": 2,
            "examples": ["l1", "l2", "l3"],
        }
    ]
    assert found.warnings() == [
        {
            "what": "follow_empty",
            "kind": "list",
            "detail": "to detail",
            "count": 2,
            "examples": ["l1", "l2", "l3"],
        }
    ]
    (line,) = caplog.messages
    assert line == (
        "`follow` of list to detail gave no link to follow on any page this run (2 pages), "
        "e.g. at l1"
    )


# ------------------------------------------------------------------ through the CLI
def _api_spec(good_spec, site_url: str, root: Path, *, each: str, extra: str = "") -> Path:
    spec = good_spec("api", site_url, root)
    text = spec.read_text().replace('each: "$.items[*]"', f'each: "{each}"')
    spec.write_text(text + extra)
    return spec


@pytest.mark.process
def test_a_crawl_that_extracts_nothing_exits_4_unless_expected(
    site, good_spec, tmp_path, crawl_cli
) -> None:
    spec = _api_spec(good_spec, site.url, tmp_path, each="$.rows[*]")  # the site has items
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "`each` of list matched nothing" in r.stderr
    assert "extracted nothing" in r.stderr
    assert "expect_empty: true" in r.stderr
    assert "Traceback" not in r.stderr
    finished = events(ws)[-1]
    assert finished["exit_code"] == EXIT_HALTED
    assert finished["nothing_extracted"] is True
    assert [w["what"] for w in finished["warnings"]] == ["each_empty", "kind_empty"]
    # status agrees with the crawl: not "done (exit 0)"
    status = crawl_cli("status", JOB_API, "--workspace", str(ws), "--json")
    report = json.loads(status.stdout)
    assert (report["state"], report["exit_code"], report["done"]) == (
        "extracted_nothing",
        EXIT_HALTED,
        False,
    )
    status = crawl_cli("status", JOB_API, "--workspace", str(ws))
    assert status.stdout.startswith(f"job {JOB_API}: extracted nothing: every page read")

    expected = _api_spec(
        good_spec, site.url, tmp_path / "b", each="$.rows[*]", extra="expect_empty: true\n"
    )
    r = crawl_cli("crawl", str(expected), "--workspace", str(tmp_path / "ws2"), "-q")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert "`each` of list matched nothing" in r.stderr  # still said
    status = crawl_cli("status", JOB_API, "--workspace", str(tmp_path / "ws2"), "--json")
    assert json.loads(status.stdout)["state"] == "done"


@pytest.mark.process
def test_responses_not_stored_when_turned_off_and_reparse_says_so(
    site, good_spec, tmp_path, crawl_cli
) -> None:
    spec = good_spec("api", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(ws), "-q", "-s", "FRAMEWORK_STORE_RESPONSES=False"
    )
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    with Workspace.open(ws, create=False, readonly=True) as w:
        assert w.store.responses_size() == (0, 0)
        assert w.store.item_counts()["complete"] > 0
    r = crawl_cli("reparse", str(spec), "--workspace", str(ws))
    assert r.returncode == EXIT_USAGE
    assert "keeps no pages" in r.stderr

    off = good_spec("api", site.url, tmp_path / "b")
    off.write_text(off.read_text() + "store_responses: false\n")
    r = crawl_cli("crawl", str(off), "--workspace", str(tmp_path / "ws2"), "-q")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    with Workspace.open(tmp_path / "ws2", create=False, readonly=True) as w:
        assert w.store.responses_size() == (0, 0)

    r = crawl_cli("crawl", str(spec), "--workspace", str(tmp_path / "ws3"), "-q")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    r = crawl_cli("crawl", str(spec), "--workspace", str(tmp_path / "ws4"), "-q",
                  "--no-store-responses")  # fmt: skip
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    with Workspace.open(tmp_path / "ws3", create=False, readonly=True) as w:
        assert w.store.responses_size()[0] > 0  # on by default
    with Workspace.open(tmp_path / "ws4", create=False, readonly=True) as w:
        assert w.store.responses_size() == (0, 0)


@pytest.mark.process
@pytest.mark.parametrize("budget", ["0.0001"])
def test_past_the_budget_storing_stops_and_says_so_once(
    site, good_spec, tmp_path, crawl_cli, budget
) -> None:
    spec = good_spec("api", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(ws), "-q",
        "-s", f"FRAMEWORK_RESPONSES_BUDGET_MB={budget}",
    )  # fmt: skip
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert r.stderr.count("FRAMEWORK_RESPONSES_BUDGET_MB") == 1
    reached = [e for e in events(ws) if e["event"] == "responses_budget_reached"]
    assert len(reached) == 1
    with Workspace.open(ws, create=False, readonly=True) as w:
        stored, _ = w.store.responses_size()
        ok = sum(n.get("ok", 0) for n in w.store.row_counts().values())
    assert stored == 1  # 105 bytes of budget: the first page reaches it
    assert ok > 1


@pytest.mark.process
def test_a_follow_that_matches_nothing_is_a_warning_and_status_shows_it(
    site, good_spec, tmp_path, crawl_cli
) -> None:
    spec = good_spec("cases", site.url, tmp_path)
    good = spec.read_text()
    spec.write_text(good.replace("a.detail::attr(href)", "a.detial::attr(href)"))
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    lists = len(site.truth.list_urls())
    assert (
        f"`follow` of list to detail gave no link to follow on any page this run ({lists} pages)"
        in r.stderr
    )
    finished = events(ws)[-1]
    assert [(w["what"], w.get("detail"), w["count"]) for w in finished["warnings"]] == [
        ("follow_empty", "to detail", lists)
    ]
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws))
    assert f"follow_empty list (to detail): {lists}x, e.g. {site.url}/cases" in status.stdout

    # run again (a cron loop does): nothing to fetch, and the diagnosis stays where the
    # headline points; this run read no page, so its log points at status alone
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws))
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "see the warnings above" not in r.stderr
    # the hint locates the workspace as the command was given it (status takes a name)
    assert f"(see `framework status fixture-cases --workspace {ws}`)" in r.stderr
    finished = events(ws)[-1]
    assert finished["counts"]["requests"] == 0
    assert [(w["what"], w["count"]) for w in finished["warnings"]] == [("follow_empty", lists)]
    assert finished["carried"] == ["list"]
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws))
    assert f"follow_empty list (to detail): {lists}x, e.g. {site.url}/cases" in status.stdout
    report = json.loads(
        crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json").stdout
    )
    assert [w["what"] for w in report["found_nothing"]["warnings"]] == ["follow_empty"]

    # fixed, and fetched again from the start: no warning, and a --fresh run is not
    # told to reparse the pages it fetches anyway
    spec.write_text(good)
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "--fresh")
    # the site's broken pages are rows in error: exit 4, with items stored
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "gave no link to follow" not in r.stderr
    assert "spec changed since the last run" in r.stderr
    assert "framework reparse" not in r.stderr
    finished = events(ws)[-1]
    assert finished["counts"]["items_new"] == 70
    assert "follow_empty" not in [w["what"] for w in finished["warnings"]]


@pytest.mark.process
def test_an_each_of_a_list_with_no_fields_that_matches_nothing_is_said(
    site, good_spec, tmp_path, crawl_cli
) -> None:
    """The usual list -> detail form: the list kind has `each` and `follow` and no
    fields, so it keeps no record; an `each` that matches nothing on one of its pages
    (a start URL that is not a list) is said all the same, and so is one that matches
    nothing anywhere (a typo), which explains the crawl's exit 4."""
    spec = good_spec("cases", site.url, tmp_path)
    good = spec.read_text()
    # the list without its one field: `each` and `follow` only
    no_fields = re.sub(r"\n  fields:\n    status: .*\n", "\n", good)
    assert "td.status" not in no_fields
    detail = f"{site.url}/cases/{next(iter(site.truth.records()))}"
    start = f'start_urls: ["{site.url}/cases"]'
    assert start in no_fields
    spec.write_text(no_fields.replace(start, f'start_urls: ["{site.url}/cases", "{detail}"]'))
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert "`each` of list matched nothing, e.g. at " + detail in r.stderr, r.stderr[-3000:]
    finished = events(ws)[-1]
    each = [(w["count"], w["examples"]) for w in finished["warnings"] if w["what"] == "each_empty"]
    assert each == [(1, [detail])]  # the real list pages matched
    assert finished["counts"]["items_new"] == 70  # the real list pages were read

    spec.write_text(no_fields.replace("table.cases tbody tr", "table.case tbody tr"))
    ws = tmp_path / "ws2"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "`each` of list matched nothing" in r.stderr
    assert "extracted nothing" in r.stderr
    assert [w["what"] for w in events(ws)[-1]["warnings"]] == ["each_empty"]


@pytest.mark.process
def test_a_sub_tab_selector_that_matches_nothing_is_said_and_reparse_clears_it(
    site, good_spec, tmp_path, crawl_cli
) -> None:
    """The hearings tab's `agenda` selector is wrong: every detail item still has its
    hearings (rows with no agenda), so only this warning tells. A reparse with the fix
    fetches nothing and says nothing of it any more."""
    spec = good_spec("cases", site.url, tmp_path)
    good = spec.read_text()
    assert 'agenda: "td.agenda::text"' in good
    spec.write_text(good.replace('agenda: "td.agenda::text"', 'agenda: "td.agneda::text"'))
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]  # the site's broken pages
    assert "field 'agenda' of detail.hearings is empty in every record this run" in r.stderr
    finished = events(ws)[-1]
    (empty,) = [w for w in finished["warnings"] if w["what"] == "field_empty"]
    assert (empty["kind"], empty["field"]) == ("detail.hearings", "agenda")
    assert empty["count"] > 1
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws))
    assert f"field_empty detail.hearings.agenda: {empty['count']}x" in status.stdout
    # the tab's part has no figure for the run (its rows are the tab's records, warned
    # above), and the table says what its `-` means
    line = next(s for s in status.stdout.splitlines() if s.strip().startswith("hearings "))
    assert line.split()[1:3] == ["-", "/"], line
    assert "(-: no figure on that side: a sub-tab's part is filled by its tab's pages" in (
        status.stdout
    )

    spec.write_text(good)
    requests = site.stats()
    r = crawl_cli("reparse", str(spec), "--workspace", str(ws), "-q", "--processes", "1")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert "is empty in every record" not in r.stderr
    assert site.stats() == requests
    done = [e for e in events(ws) if e["event"] == "reparse_finished"][-1]
    assert "field_empty" not in [w["what"] for w in done["warnings"]]
    assert done["counts"]["items_changed"] > 0  # the agendas reached the items
    # each item counted once: its detail page read again unchanged, then its tab changed
    items = done["items"]["complete"] + done["items"]["incomplete"]
    assert done["counts"]["items_changed"] + done["counts"]["items_unchanged"] == items
    assert done["counts"]["items_unchanged"] > 0  # the cases with no hearing


@pytest.mark.process
def test_a_template_value_the_record_lacks_is_a_typed_row_error_with_no_traceback(
    site, good_spec, tmp_path, crawl_cli
) -> None:
    """A sub-tab body names a value no page gives (a carried list field whose selector
    matches nothing): each detail page read is an error row saying so (the crawl goes on
    past the first), and the log has no traceback (the spec's data, not a fault of the
    framework)."""
    spec = good_spec("cases", site.url, tmp_path)
    text = spec.read_text()
    text = text.replace(
        'status: "td.status::text"', 'status: "td.status::text"\n    desk: "td.desk::text"'
    )
    text = text.replace('body: {form: {case: "{id}"}}', 'body: {form: {case: "{id}", d: "{desk}"}}')
    spec.write_text(text)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    with Workspace.open(ws, create=False, readonly=True) as opened:
        errors = [
            (row.last_error_kind, row.last_error)
            for row in opened.store.iter_rows(kind="detail")
            if row.last_error and "desk" in row.last_error
        ]
    assert len(errors) > 1
    assert set(errors) == {
        ("parse", "template '{desk}' needs a value for {desk}, the record has none")
    }
