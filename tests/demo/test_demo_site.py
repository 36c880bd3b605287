"""The demo site itself: pages, sub-tabs, faults, counters, and that its truth matches
what it serves. A plain HTTP client (requests, http.client) and parsel; no crawler."""

from __future__ import annotations

import datetime as dt
import email.utils
import http.client
import json
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urljoin
from urllib.robotparser import RobotFileParser

import pytest
import requests
from parsel import Selector

from framework.demo.data import PER_PAGE, generate
from framework.demo.faults import Fault
from framework.demo.site import DemoSite, main
from framework.demo.truth import TABS, Truth, expected_records
from framework.spec.load import load_document, parse_document, read_text
from tests.paths import REPO, TESTS

GOOD = TESTS / "specs" / "good"
ROOT = REPO


def norm(text: str | None) -> str | None:
    return None if text is None else " ".join(text.split())


def get(url: str, **kw: Any) -> requests.Response:
    return requests.get(url, timeout=10, **kw)


def extract_detail(html: str) -> dict[str, Any]:
    """A reference extraction with the selectors of projects/demo/job.yaml."""
    sel = Selector(text=html)
    filed = sel.css(".filed::text").get()
    amount = sel.css(".amount::text").get() or sel.css("[data-field=amount]::text").get()
    embedded = re.search(r"window\.__CASE__ = (\{.*?\});", html)
    assert filed is not None
    assert amount is not None
    assert embedded is not None
    return {
        "source_id": norm(sel.css("#case-number::text").get()),
        "title": norm(sel.css("h1.title::text").get()),
        "court": norm(sel.css(".court::text").get()),
        "category": json.loads(embedded.group(1))["category"],
        "filed": dt.datetime.strptime(filed, "%d.%m.%Y").date().isoformat(),
        "amount": float(re.sub(r"[^0-9,]", "", amount).replace(",", ".")),
        "room": norm(sel.css(".room::text").get()),
        "plaintiff": norm(sel.css(".plaintiff::text").get()),
        "defendant": norm(sel.css(".defendant::text").get()),
        "judges": [norm(t) for t in sel.css("ul.judges li::text").getall()],
    }


def walk_list(start: str) -> tuple[list[str], list[tuple[str, str | None]]]:
    """Follow `a.next` from ``start``; return pages visited and (detail url, status) rows."""
    pages, rows, url = [], [], start
    while url:
        resp = get(url)
        assert resp.status_code == 200
        pages.append(url)
        sel = Selector(text=resp.text)
        for row in sel.css("table.cases tbody tr"):
            href = row.css("a.detail::attr(href)").get()
            assert href is not None
            rows.append((urljoin(url, href), norm(row.css("td.status::text").get())))
        nxt = sel.css("a.next::attr(href)").get()
        url = urljoin(url, nxt) if nxt else ""
    return pages, rows


# -- data and truth ------------------------------------------------------------------


def test_data_is_deterministic_and_seeded() -> None:
    assert generate(70, 7) == generate(70, 7)
    assert generate(70, 7) != generate(70, 8)
    base = "http://127.0.0.1:1"
    assert expected_records(base) == expected_records(base)
    assert len(expected_records(base)) == 70
    # Good cases do not depend on whether broken rows are added.
    assert generate(70, 7, edge_cases=False).cases == generate(70, 7).good


def test_default_site_has_the_documented_shape(site: DemoSite) -> None:
    truth = site.truth
    assert len(truth.ids) == 70
    assert len(set(truth.ids)) == 70
    assert len(truth.list_urls()) == 7
    assert len(truth.detail_urls()) == 72  # 70 good + a 404 + an untitled page
    assert {b.reason for b in truth.broken} == {"http_404", "missing_required", "http_500"}
    assert truth.incomplete == {"C2024-0007": ("hearings",)}
    assert len(truth.complete_ids) == 69
    assert truth.fallbacks
    assert all(f == ("amount",) for f in truth.fallbacks.values())
    assert any(r["room"] is None for r in truth.expected_records())
    assert any(r["rulings"] == [] for r in truth.expected_records() if "rulings" in r)
    assert len(truth.subtab_requests()) == 70 * 3


# -- list pages, detail pages, truth consistency -----------------------------------------


def test_list_pagination_reaches_every_row(site: DemoSite) -> None:
    truth = site.truth
    pages, rows = walk_list(site.url + "/cases")
    assert pages == truth.list_urls()
    assert [url for url, _ in rows] == truth.detail_urls()
    statuses = {url.rsplit("/", 1)[1]: status for url, status in rows}
    for sid, record in truth.records().items():
        assert statuses[sid] == record["status"]
    # Every link style is exercised: root-relative, relative, absolute.
    html = get(site.url + "/cases").text
    hrefs = Selector(text=html).css("a.detail::attr(href)").getall()
    assert any(h.startswith("/") for h in hrefs)
    assert any(h.startswith("cases/") for h in hrefs)
    assert any(h.startswith("http://") for h in hrefs)
    assert len(hrefs) == PER_PAGE


def test_detail_pages_match_the_truth(site: DemoSite) -> None:
    records = site.truth.records()
    session = requests.Session()
    for sid, record in records.items():
        resp = session.get(f"{site.url}/cases/{sid}", timeout=10)
        assert resp.status_code == 200
        got = extract_detail(resp.text)
        want = {k: record[k] for k in got}
        assert got == want, sid


def test_layout_variant_needs_the_fallback(site: DemoSite) -> None:
    truth = site.truth
    variant = next(iter(truth.fallbacks))
    normal = next(i for i in truth.ids if i not in truth.fallbacks)
    v = Selector(text=get(f"{site.url}/cases/{variant}").text)
    n = Selector(text=get(f"{site.url}/cases/{normal}").text)
    assert v.css(".amount::text").get() is None
    assert v.css("[data-field=amount]::text").get()
    assert n.css(".amount::text").get() == n.css("[data-field=amount]::text").get()


def test_broken_pages_break_as_the_truth_says(site: DemoSite) -> None:
    for broken in site.truth.broken:
        if broken.kind == "detail":
            resp = get(broken.url)
            assert resp.status_code == broken.status
            if broken.reason == "missing_required":
                sel = Selector(text=resp.text)
                assert norm(sel.css("#case-number::text").get()) == broken.source_id
                assert sel.css("h1.title").get() is None
        else:
            assert get(broken.url).status_code == broken.status == 500


def test_subtabs_match_the_truth(site: DemoSite) -> None:
    records = site.truth.records()
    session = requests.Session()
    for sid, record in records.items():
        tab = f"{site.url}/cases/{sid}/tab"
        if "rulings" in record:
            rows = session.get(f"{tab}/rulings", timeout=10).json()["rows"]
            assert rows == record["rulings"]
        if "hearings" in record:
            sel = Selector(text=session.get(f"{tab}/hearings", timeout=10).text)
            hearings = [
                {
                    "date": dt.datetime.strptime(r.css("td.date::text").get() or "", "%d.%m.%Y")
                    .date()
                    .isoformat(),
                    "agenda": norm(r.css("td.agenda::text").get()),
                }
                for r in sel.css("tbody tr")
            ]
            assert hearings == record["hearings"]
        resp = session.post(f"{tab}/documents", data={"case": sid}, timeout=10)
        links = Selector(text=resp.text).css("li a")
        docs = [
            {"name": a.css("::text").get(), "url": urljoin(resp.url, a.attrib["href"])}
            for a in links
        ]
        assert docs == record["documents"]


def test_every_expected_request_answers_as_the_truth_says(site: DemoSite) -> None:
    truth = site.truth
    broken = {b.url: b.status for b in truth.broken}
    session = requests.Session()
    wanted = truth.requests()
    assert len(wanted) == len({(r.method, r.url, r.body) for r in wanted}) == 7 + 72 + 210
    for req in wanted:
        body = dict(parse_qsl(req.body)) if req.body else None
        resp = session.request(req.method, req.url, data=body, timeout=10)
        assert resp.status_code == broken.get(req.url, 200), req


def test_post_tab_checks_method_and_body(site: DemoSite) -> None:
    sid = site.truth.ids[0]
    url = f"{site.url}/cases/{sid}/tab/documents"
    assert get(url).status_code == 405
    assert requests.post(url, data={"case": "C2024-0002"}, timeout=10).status_code == 400
    assert requests.post(url, timeout=10).status_code == 400
    assert requests.post(url, data={"case": sid}, timeout=10).status_code == 200
    assert get(site.url + "/nowhere").status_code == 404


def test_courts_chain_reaches_every_detail(site: DemoSite) -> None:
    sel = Selector(text=get(site.url + "/courts").text)
    courts = [urljoin(site.url + "/courts", h) for h in sel.css("a.court::attr(href)").getall()]
    assert len(courts) == 3
    details: list[str] = []
    for court in courts:
        pages, rows = walk_list(court)
        assert pages == site.truth.list_urls(court.removeprefix(site.url))
        details += [url for url, _ in rows]
    assert sorted(details) == sorted(site.truth.detail_urls())


def test_json_api_pages_and_offsets(site: DemoSite) -> None:
    want = site.truth.api_records()
    got: dict[str, dict[str, Any]] = {}
    page = 1
    while True:
        doc = get(f"{site.url}/api/cases?page={page}").json()
        for item in doc["items"]:
            got[item["id"]] = item
        if not doc["has_more"]:
            break
        page += 1
    assert page == 7
    assert get(f"{site.url}/api/cases?page=8").json() == {"page": 8, "items": [], "has_more": False}
    assert list(got) == list(want)
    for sid, item in got.items():
        assert {k: item[k] for k in ("title", "court", "filed", "amount", "status")} == {
            k: want[sid][k] for k in ("title", "court", "filed", "amount", "status")
        }
    by_offset = get(f"{site.url}/api/cases?offset=65").json()
    assert [i["id"] for i in by_offset["items"]] == list(want)[65:]
    assert by_offset["has_more"] is False
    assert get(f"{site.url}/api/cases?offset=x").status_code == 404


def test_robots_allows_everything(site: DemoSite) -> None:
    robots = RobotFileParser(site.url + "/robots.txt")
    robots.parse(get(site.url + "/robots.txt").text.splitlines())
    assert robots.can_fetch("framework", site.url + "/cases/C2024-0001")


# -- counters, faults, control ---------------------------------------------------------


def test_hits_count_each_request(make_site: Callable[..., DemoSite]) -> None:
    s = make_site(cases=12)
    for _ in range(3):
        get(s.url + "/cases?page=2")
    requests.post(
        f"{s.url}/cases/C2024-0001/tab/documents", data={"case": "C2024-0001"}, timeout=10
    )
    get(s.url + "/_stats")  # control endpoints are not counted
    assert s.hits("/cases?page=2") == 3
    assert s.hits(s.url + "/cases?page=2") == 3
    assert s.hits("/cases/C2024-0001/tab/documents", method="POST") == 1
    assert s.hits("/cases/C2024-0001/tab/documents", method="GET") == 0
    stats = get(s.url + "/_stats").json()
    assert stats["total"] == 4
    assert stats["by_path"]["/cases?page=2"] == 3
    s.reset_stats()
    assert s.hits("/cases?page=2") == 0


def test_rate_limit_faults_with_seconds_and_dates(make_site: Callable[..., DemoSite]) -> None:
    s = make_site(
        cases=12,
        faults=[
            Fault("/cases?page=2", 429, times=2, retry_after=3),
            Fault("/cases/*", 503, times=1, retry_after=30, retry_after_date=True),
        ],
    )
    first, second, third = (get(s.url + "/cases?page=2") for _ in range(3))
    assert (first.status_code, second.status_code, third.status_code) == (429, 429, 200)
    assert first.headers["Retry-After"] == "3"
    # The 503 rule counts per target: each detail page fails once, then works.
    for sid in ("C2024-0001", "C2024-0002"):
        failed = get(f"{s.url}/cases/{sid}")
        assert failed.status_code == 503
        when = email.utils.parsedate_to_datetime(failed.headers["Retry-After"])
        assert when > dt.datetime.now(dt.UTC)
        assert get(f"{s.url}/cases/{sid}").status_code == 200
    stats = {r["target"]: r["statuses"] for r in s.stats()["requests"]}
    assert stats["/cases?page=2"] == {"429": 2, "200": 1}


def test_permanent_fault_makes_a_record_incomplete(make_site: Callable[..., DemoSite]) -> None:
    s = make_site(faults=[Fault.parse("/cases/C2024-0003/tab/rulings@500")])
    for _ in range(4):
        assert get(s.url + "/cases/C2024-0003/tab/rulings").status_code == 500
    truth = s.truth
    assert truth.incomplete["C2024-0003"] == ("rulings",)
    assert "rulings" not in truth.records()["C2024-0003"]
    assert any(b.url.endswith("/C2024-0003/tab/rulings") for b in truth.broken)


def test_control_endpoint_replaces_faults_and_delay(make_site: Callable[..., DemoSite]) -> None:
    s = make_site(cases=12)
    doc = {"faults": [{"pattern": "/cases", "status": 503, "times": 1}], "delay": 0.2}
    resp = requests.post(s.url + "/_faults", data=json.dumps(doc), timeout=10)
    assert resp.json()["faults"][0]["status"] == 503
    assert get(s.url + "/cases").status_code == 503
    started = time.monotonic()
    assert get(s.url + "/cases").status_code == 200
    assert time.monotonic() - started >= 0.2  # a lower bound: the delay happened at all
    bad = requests.post(s.url + "/_faults", data=b'{"faults": [{"status": 200}]}', timeout=10)
    assert bad.status_code == 400
    assert get(s.url + "/_faults").json()["delay"] == 0.2


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("/cases?page=3@429*2,ra=1", Fault("/cases?page=3", 429, 2, 1)),
        ("/cases/*@503*1,ra-date=2", Fault("/cases/*", 503, 1, 2, True)),
        ("/x/tab/rulings@500", Fault("/x/tab/rulings", 500)),
    ],
)
def test_fault_command_line_form(text: str, fault: Fault) -> None:
    assert Fault.parse(text) == fault


@pytest.mark.parametrize("text", ["/cases", "/cases@200", "/cases@503*0", "/cases@503,wait=1"])
def test_bad_fault_forms_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"fault|status|times"):
        Fault.parse(text)


# -- the wire ----------------------------------------------------------------------------


def test_keep_alive_serves_many_requests_on_one_connection(site: DemoSite) -> None:
    host, port = site.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.connect()
    sock = conn.sock
    for sid in site.truth.ids[:20]:
        conn.request("GET", f"/cases/{sid}")
        resp = conn.getresponse()
        assert resp.status == 200
        assert sid in resp.read().decode()
    assert conn.sock is sock  # never reconnected
    conn.request("GET", "/cases", headers={"Connection": "close"})
    resp = conn.getresponse()
    resp.read()
    assert resp.will_close
    conn.close()


def test_malformed_request_gets_400(site: DemoSite) -> None:
    host, port = site.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")


def test_sizes_and_edge_case_switch(make_site: Callable[..., DemoSite]) -> None:
    small = make_site(cases=25, edge_cases=False)
    truth: Truth = small.truth
    assert len(truth.ids) == 25
    assert truth.broken == []
    assert truth.incomplete == {}
    pages, rows = walk_list(small.url + "/cases")
    assert len(pages) == 3
    assert len(rows) == 25
    assert sorted(TABS) == ["documents", "hearings", "rulings"]


def test_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        DemoSite(host="0.0.0.0")


def test_stop_closes_the_port_and_is_idempotent() -> None:
    s = DemoSite(cases=5).start()
    host, port = s.url.removeprefix("http://").split(":")
    keep = http.client.HTTPConnection(host, int(port), timeout=10)
    keep.request("GET", "/cases")
    keep.getresponse().read()
    s.stop()  # a keep-alive connection must not hold the server open
    s.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2).close()
    keep.close()


@pytest.mark.kill
def test_runs_as_a_process(site_process: Callable[..., Any]) -> None:
    proc = site_process("--cases", "20", "--fault", "/cases@503*1,ra=1")
    assert get(proc.url + "/cases").status_code == 503
    assert get(proc.url + "/cases").status_code == 200
    assert get(proc.url + "/_stats").json()["by_path"] == {"/cases": 2}
    assert proc.stop() == 0  # SIGTERM is a clean stop


def test_command_line_refuses_bad_faults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--fault", "nonsense"]) == 2
    assert "fault" in capsys.readouterr().err


# -- the specs written for this site -----------------------------------------------------


@pytest.mark.parametrize("name", ["cases", "courts", "api", "api_offset"])
def test_good_specs_load_and_name_the_truths_fields(
    name: str, site: DemoSite, tmp_path: Path, good_spec: Callable[..., Path]
) -> None:
    path = good_spec(name, site.url, tmp_path)
    spec, _ = load_document(path)
    assert all(u.startswith(site.url + "/") for u in spec.start_urls)
    assert "{base}" not in path.read_text()
    kinds = spec.page_kinds()
    fields: set[str] = set()
    for kind in kinds.values():
        fields |= set(kind.fields) | set(kind.subtabs)
    meta = {"dedupe_key", "source_type", "source_id"}
    if name.startswith("api"):
        want = next(iter(site.truth.api_records(spec.source_type).values()))
    else:
        want = next(iter(site.truth.records().values()))
        assert kinds["detail"].subtabs["documents"].method == "POST"
    assert fields == set(want) - meta
    assert want["dedupe_key"] == f"{spec.source_type}:{want['source_id']}"


def test_demo_job_matches_the_cases_spec() -> None:
    demo, _ = load_document(ROOT / "projects" / "demo" / "job.yaml")
    assert demo.start_urls == ("http://127.0.0.1:8800/cases",)
    fixture = (GOOD / "cases.yaml").read_text().replace("{base}", "http://127.0.0.1:8800")
    cases = parse_document(read_text(fixture, "cases.yaml"))
    assert cases.page_kinds() == demo.page_kinds()
    assert cases.source_type == demo.source_type


def test_a_failing_handler_answers_500_and_keeps_serving(
    make_site: Callable[..., DemoSite], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = make_site(cases=5)

    def boom(req: Any) -> tuple[int, bytes]:
        raise RuntimeError("bug")

    monkeypatch.setattr(s, "_route", boom)
    session = requests.Session()
    assert session.get(s.url + "/cases", timeout=10).status_code == 500
    monkeypatch.undo()
    assert session.get(s.url + "/cases", timeout=10).status_code == 200
