"""Values that fail their type are findings (framework.crawl.findings, ``type_failed``):
counted per kind and field over every record of every page, kept, held or dropped,
with example URLs and the raw text; a warning past the share; shown beside the fill
rate by `framework status`, counted in the reparse's summary, alike whether the
reparse reads a kind whole or field by field."""

from __future__ import annotations

import json
import logging
import pickle
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from scrapy.http import HtmlResponse

from framework.crawl.findings import TYPE_FAILED_SHARE, Findings
from framework.crawl.outcome import OutcomeBuilder, TabOutcome
from framework.crawl.page import CompiledJob
from framework.demo.data import Case
from framework.spec import load_spec
from framework.workspace import Row, RowStatus
from tests.fixtures.crawl import events
from tests.fixtures.site import write_good_spec

EXIT_OK, EXIT_HALTED = 0, 4
DAY_FIRST = 'format: "%d.%m.%Y"}\n    amount'
# month first: a date whose day is past 12 ("17.01.2023") fails, the others convert
MONTH_FIRST = 'format: "%m.%d.%Y"}\n    amount'


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, name: str, **data: Any) -> None:
        self.events.append({"event": name, **data})


# --------------------------------------------------------------------- the counts
def test_every_failure_is_counted_a_warning_only_past_the_share(caplog) -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.type_failed"))
    with caplog.at_level(logging.INFO, "test.type_failed"):
        for i in range(40):
            # one record per page; every page's price fails, one page in 20 its date
            errors = [("price", f"not a number: 'N/A {i}'")]
            if i % 20 == 0:
                errors.append(("filed", f"not a date: '{i}.13.2024'"))
            found.type_failures("detail", f"http://h/{i}", 1, errors)
        found.type_failures("detail", "http://h/list", 3, [])  # records with no failure
        found.finish(["detail"])
    assert [(e["what"], e["field"], e["url"]) for e in rec.events] == [
        ("type_failed", "price", "http://h/0"),
        ("type_failed", "filed", "http://h/0"),
    ]
    assert rec.events[0]["text"] == "not a number: 'N/A 0'"
    by_field = {f["field"]: f for f in found.type_failed()}
    assert by_field["filed"] == {
        "what": "type_failed",
        "kind": "detail",
        "field": "filed",
        "count": 2,
        "records": 43,
        "examples": ["http://h/0", "http://h/20"],
        "text": "not a date: '0.13.2024'",
    }
    assert (by_field["price"]["count"], by_field["price"]["records"]) == (40, 43)
    assert found.type_failed_count() == 42
    # 2 of 43 is under the share: counted, never a warning; 40 of 43 is one warning
    assert 2 / 43 < TYPE_FAILED_SHARE < 40 / 43
    assert [w["field"] for w in found.warnings()] == ["price"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "field 'price' of detail failed its type in 40 of 43 records (93%; a warning past "
        "10%), e.g. not a number: 'N/A 0' at http://h/0: a format, a locale or a type "
        "that does not fit the site?"
    ]
    assert sum("failed its type" in r.getMessage() for r in caplog.records) == 3


def test_rows_of_a_group_are_one_field_and_secret_or_long_texts_are_masked() -> None:
    rec = Recorder()
    found = Findings(rec, logging.getLogger("test.type_failed"))
    found.type_failures(
        "detail",
        "http://h/1?token=abc",
        1,
        [
            ("parties[0].since", "not a date: 'x'"),
            ("parties[3].since", "not a date: 'y'"),
            ("api_key", "not a number: 'sk-live-123'"),
            ("link", "not a url: 'http://u:pw@h/?sig=s3cret' " + "z" * 300),
        ],
    )
    got = {f["field"]: f for f in found.type_failed()}
    assert sorted(got) == ["api_key", "link", "parties[].since"]
    assert got["parties[].since"]["count"] == 2
    assert got["api_key"]["text"] == "not a number: [redacted]"
    link = got["link"]["text"]
    assert "pw" not in link
    assert "s3cret" not in link
    assert len(link) == 200
    assert link.endswith("\u2026")


# ------------------------------------------------------------- through the CLI
def _failing(cases: tuple[Case, ...]) -> list[Case]:
    """The cases with a detail page whose date fails month-first (its day is past 12)."""
    return [c for c in cases if not c.detail_missing and c.filed.day > 12]


def _reparse(crawl_cli, spec: Path, ws: Path, *args: str) -> tuple[str, dict[str, Any]]:
    r = crawl_cli("reparse", str(spec), "--workspace", str(ws), "--processes", "1", *args)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    done = [e for e in events(ws) if e["event"] == "reparse_finished"][-1]
    return r.stderr, done


@pytest.mark.process
def test_a_date_failing_on_some_records_in_status_and_in_every_reparse(
    make_site, tmp_path, crawl_cli
) -> None:
    site = make_site(cases=10, edge_cases=False)
    spec = write_good_spec("cases", site.url, tmp_path)
    good = spec.read_text(encoding="utf-8")
    assert DAY_FIRST in good
    spec.write_text(good.replace(DAY_FIRST, MONTH_FIRST), encoding="utf-8")
    failing = _failing(site.data.cases)
    n = len(failing)
    assert n / 10 > TYPE_FAILED_SHARE  # the demo's dates: a warning, not a mere count
    urls = {f"{site.url}/cases/{c.id}" for c in failing}
    texts = {c.filed.strftime("%d.%m.%Y") for c in failing}

    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "INFO")
    # the items are stored, with a null date: a warning does not change the exit code
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    said = [line for line in r.stderr.splitlines() if "field 'filed' of detail failed" in line]
    assert len(said) == 2, said  # the first failure (info), the warning at the end
    assert "INFO: " in said[0]
    assert f"WARNING: field 'filed' of detail failed its type in {n} of 10 records" in said[1]

    report = json.loads(
        crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json").stdout
    )
    (entry,) = report["fill_rates"]["type_failed"]
    assert (entry["kind"], entry["field"], entry["count"], entry["records"]) == (
        "detail",
        "filed",
        n,
        10,
    )
    assert len(entry["examples"]) == min(n, 3)
    assert set(entry["examples"]) <= urls
    raw = re.fullmatch(r"not a date: '([\d.]+)'; expected '%m\.%d\.%Y'", entry["text"])
    assert raw is not None, entry["text"]
    assert raw.group(1) in texts
    assert report["fill_rates"]["last_run"]["detail"]["fields"]["filed"] == (10 - n) / 10
    assert [w["what"] for w in report["found_nothing"]["warnings"]] == ["type_failed"]
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws)).stdout
    (line,) = [s for s in status.splitlines() if s.strip().startswith("filed ")]
    assert line.endswith(
        f"({n} failed their type, e.g. {entry['text']} at {entry['examples'][0]})"
    ), line

    # a whole reparse (--all) says the count in its summary line and names the field
    said, whole = _reparse(crawl_cli, spec, ws, "--all")
    assert f"; 0 pages failed; {n} values failed their type; " in said, said
    assert whole["counts"]["type_failed"] == n
    assert whole["counts"]["narrow"] == 0
    # its examples are the first in row order (the crawl's, the first to arrive)
    (again,) = whole["type_failed"]
    assert {k: v for k, v in again.items() if k not in ("examples", "text")} == {
        k: v for k, v in entry.items() if k not in ("examples", "text")
    }
    assert set(again["examples"]) <= urls
    assert (
        f"fixture-cases: values that failed their type: detail.filed {n} of 10 records "
        f"(e.g. {again['text']} at {again['examples'][0]})"
    ) in said

    # another field's fix: the detail pages are read field by field (the date not
    # among the fields read), and the same values are counted
    spec.write_text(
        good.replace(DAY_FIRST, MONTH_FIRST).replace('".court::text"', '"*.court::text"'),
        encoding="utf-8",
    )
    said, narrow = _reparse(crawl_cli, spec, ws)
    assert narrow["counts"]["narrow"] == 10, said
    assert f"; {n} values failed their type; " in said
    assert narrow["counts"]["type_failed"] == n
    assert narrow["type_failed"] == whole["type_failed"]

    # the date fixed: nothing fails, and status says no more of it
    spec.write_text(good, encoding="utf-8")
    said, fixed = _reparse(crawl_cli, spec, ws)
    assert "; 0 values failed their type; " in said
    assert "values that failed their type:" not in said
    assert fixed["type_failed"] == []
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws)).stdout
    assert "failed their type" not in status
    (line,) = [s for s in status.splitlines() if s.strip().startswith("filed ")]
    assert line.split()[1:4] == ["100.0%", "/", "100.0%"], line


@pytest.mark.process
def test_a_dropped_record_s_failures_are_counted_too(make_site, tmp_path, crawl_cli) -> None:
    """The fixture site's untitled case is dropped (its required title is missing): its
    value that fails its type is counted all the same, among its kind's records."""
    site = make_site(cases=10)
    spec = write_good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    assert "type: date, " + DAY_FIRST in text
    spec.write_text(text.replace("type: date, " + DAY_FIRST, "type: integer}\n    amount"))
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    # the site's broken pages (a 404, a dropped record, a failing tab): rows in error
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    read = [c for c in site.data.cases if not c.detail_missing]
    assert len(read) == 11
    assert sum(c.title is None for c in read) == 1
    finished = events(ws)[-1]
    assert finished["counts"]["records_invalid"] == 1  # the untitled one, dropped
    (entry,) = finished["type_failed"]
    # every date fails `integer`: the 10 items' and the dropped record's
    assert (entry["field"], entry["count"], entry["records"]) == ("filed", 11, 11)
    assert re.fullmatch(r"not a (whole )?number: '\d\d\.\d\d\.\d{4}'.*", entry["text"])


# ------------------------------------------------------------------ in a sub-tab
HEARING_DAY_FIRST = 'type: date, format: "%d.%m.%Y"}\n        agenda'
HEARING_MONTH_FIRST = 'type: date, format: "%m.%d.%Y"}\n        agenda'


def _hearings_spec(site: Any, root: Path) -> Path:
    """The fixture spec with the hearings tab's date read month first: a hearing whose
    day is past 12 fails its type, the others convert."""
    spec = write_good_spec("cases", site.url, root)
    text = spec.read_text(encoding="utf-8")
    assert text.count(HEARING_DAY_FIRST) == 1
    spec.write_text(text.replace(HEARING_DAY_FIRST, HEARING_MONTH_FIRST), encoding="utf-8")
    return spec


def test_a_sub_tab_page_s_failures_survive_the_reparse_s_process_boundary(
    make_site, tmp_path
) -> None:
    """A reparse worker hands its writer the parsed page pickled: the failures of a
    tab's rows must travel with it (OutcomeBuilder.read is what a worker runs)."""
    site = make_site(cases=10, edge_cases=False)
    case = next(c for c in site.data.cases if any(h.date.day > 12 for h in c.hearings))
    spec = load_spec(_hearings_spec(site, tmp_path))
    job = CompiledJob(spec)
    url = f"{site.url}/cases/{case.id}/tab/hearings"
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - the local fixture site
        response = HtmlResponse(url, body=answer.read(), encoding="utf-8")
    row = Row(
        id=7,
        kind="detail.hearings",
        url=url,
        method="GET",
        body=None,
        body_type=None,
        parent_id=3,
        status=RowStatus.PENDING,
        attempts=0,
        retryable=True,
        last_error_kind=None,
        last_error=None,
        last_http_status=None,
        context={"item_key": "k", "tab": "hearings"},
        created_at="2024-01-01T00:00:00Z",
        updated_at="2024-01-01T00:00:00Z",
    )
    # what the worker pickles, the writer unpickles: our own bytes, never a site's
    read = pickle.loads(pickle.dumps(OutcomeBuilder(job).read(row, response)))  # noqa: S301
    failing = [h for h in case.hearings if h.date.day > 12]
    assert isinstance(read, TabOutcome)
    assert [f for f, _ in read.type_errors] == ["date"] * len(failing)
    assert [m.split("'")[1] for _, m in read.type_errors] == [
        h.date.strftime("%d.%m.%Y") for h in failing
    ]
    assert len(read.parts[0].value) == len(case.hearings)


@pytest.mark.process
def test_a_date_failing_in_a_sub_tab_is_counted_as_the_tab_kind_s(
    make_site, tmp_path, crawl_cli
) -> None:
    site = make_site(cases=10, edge_cases=False)
    spec = _hearings_spec(site, tmp_path)
    hearings = [h for c in site.data.cases for h in c.hearings]
    failing = [h for h in hearings if h.date.day > 12]
    n, rows = len(failing), len(hearings)
    assert 0 < n < rows  # some rows fail, some convert
    texts = {h.date.strftime("%d.%m.%Y") for h in failing}
    pages = {f"{site.url}/cases/{c.id}/tab/hearings" for c in site.data.cases}

    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "INFO")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert "field 'date' of detail.hearings failed its type" in r.stderr
    report = json.loads(
        crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json").stdout
    )
    (entry,) = report["fill_rates"]["type_failed"]
    assert (entry["kind"], entry["field"], entry["count"], entry["records"]) == (
        "detail.hearings",
        "date",
        n,
        rows,
    )
    assert set(entry["examples"]) <= pages
    raw = re.fullmatch(r"not a date: '([\d.]+)'; expected '%m\.%d\.%Y'", entry["text"])
    assert raw is not None, entry["text"]
    assert raw.group(1) in texts

    # a whole reparse counts the same, its pages parsed by a worker process or by the
    # writer (whichever takes a chunk first): the failures travel with the parse
    r = crawl_cli("reparse", str(spec), "--workspace", str(ws), "--all", "--processes", "2")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    said = r.stderr
    whole = [e for e in events(ws) if e["event"] == "reparse_finished"][-1]
    assert whole["processes"] == 2
    assert whole["counts"]["type_failed"] == n, said
    (again,) = whole["type_failed"]
    assert {k: v for k, v in again.items() if k not in ("examples", "text")} == {
        k: v for k, v in entry.items() if k not in ("examples", "text")
    }
    assert f"detail.hearings.date {n} of {rows} records" in said


def test_the_fields_that_failed_are_told_by_the_runs_events() -> None:
    """What a narrow reparse reads again: the fields whose values failed in any run
    (a killed one's first-failure events included), unknown past a run from before the
    count, or past the lookback."""
    from framework.crawl.narrow import FAILED_LOOKBACK, failed_fields

    finished = {"event": "run_finished", "type_failed": [{"kind": "detail", "field": "filed"}]}
    killed = {"event": "found_nothing", "what": "type_failed", "kind": "list", "field": "n"}
    other = {"event": "found_nothing", "what": "field_empty", "kind": "list", "field": "x"}
    clean = {"event": "reparse_finished", "type_failed": []}
    assert failed_fields([clean, killed, other, finished]) == {("detail", "filed"), ("list", "n")}
    assert failed_fields([]) == set()
    assert failed_fields([clean, {"event": "run_finished"}]) is None  # before the count
    assert failed_fields([clean] * FAILED_LOOKBACK) == set()
    assert failed_fields([clean] * (FAILED_LOOKBACK + 1)) is None
