"""Sites that fight back, from a YAML spec only: soft bans stop the crawl as a
checkpoint (exit 3) and nothing of the ban page is stored; per page kind rate limits as
the site observed them; the final URL of a redirect in the URL log; and `validate`
refusing parts of a spec that would never run.

Real crawls through the real CLI against tests/fixtures/blocking_site.py, which counts
requests in flight and their arrival times on the server's side.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from scrapy.http import HtmlResponse

from framework.crawl.blocking import Detector, RateGate, Slots
from framework.crawl.page import Guard
from framework.extract.patterns import Limits
from framework.spec.models import JobSpec
from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.blocking_site import ITEMS, BlockingSite, truth
from tests.fixtures.crawl import CLI, events, run_cli, url_log, workspace_items

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_CHECKPOINT = 3
SOURCE = "fb"


def write_spec(root: Path, url: str, *, detail: str = "", job: str = "", name: str = "fb") -> Path:
    """A list -> detail spec of the blocking site; ``detail`` and ``job`` are extra
    YAML lines for the detail kind and the job (rates, blocked rules)."""
    text = f"""\
name: {name}
source_type: {SOURCE}
start_urls: ["{url}/list?page=1"]
list:
  each: "li.product"
  follow: "a::attr(href)"
  next: "a.next::attr(href)"
detail:
  id: {{css: ".product::attr(data-id)", required: true}}
  fields:
    title: {{css: "h1::text", required: true}}
    price: ".price::text"
{detail}{job}"""
    spec = root / "projects" / name / "job.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(text, encoding="utf-8")
    return spec


def crawl(spec: Path, ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("crawl", str(spec), "--workspace", str(ws), *extra, cwd=spec.parent)


def status_of(spec: Path, ws: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("status", spec.parent.name, "--workspace", str(ws), *extra, cwd=spec.parent)


def row_states(ws: Path) -> dict[str, dict[str, int]]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return {k: {str(s): n for s, n in v.items()} for k, v in w.store.row_counts().items()}


def assert_only_truth(ws: Path) -> dict[str, dict[str, Any]]:
    """Every stored item is exactly the truth's (a ban page stored nothing)."""
    items = workspace_items(ws)
    expected = truth(SOURCE)
    for key, item in items.items():
        assert item == expected[key], key
    return items


# ------------------------------------------------------------------ soft bans
@pytest.mark.process
def test_a_captcha_page_stops_the_crawl_and_the_resume_completes(blocking_site, tmp_path):
    site: BlockingSite = blocking_site(ban_after=10, ban="captcha")
    spec = write_spec(tmp_path, site.url, job='blocked: {css: "form#captcha", name: captcha}\n')
    ws = tmp_path / "ws"

    first = crawl(spec, ws)
    assert first.returncode == EXIT_CHECKPOINT, first.stderr[-3000:]
    # one line names the URL and the rule; the verdict says it is a block
    warned = [ln for ln in first.stderr.splitlines() if "matched the blocked rule captcha" in ln]
    assert len(warned) == 1, first.stderr[-3000:]
    assert site.url in warned[0]
    assert "blocked" in first.stderr.splitlines()[-1]
    stored = assert_only_truth(ws)
    assert len(stored) < ITEMS
    # the ban pages burnt no attempt: every row not ok is pending with 0 attempts
    with Workspace.open(ws, create=False, readonly=True) as w:
        counts = w.store.row_counts()
        assert not any(v.get(RowStatus.ERROR) for v in counts.values()), counts
        pending = [r for r in w.store.resumable(3)]
    assert pending
    assert all(r.status is RowStatus.PENDING and r.attempts == 0 for r in pending)
    blocked = [e for e in events(ws) if e["event"] == "blocked"]
    assert len(blocked) == 1
    assert blocked[0]["rule"] == "captcha"
    assert blocked[0]["url"].startswith(site.url)
    finished = [e for e in events(ws) if e["event"] == "run_finished"][-1]
    assert finished["reason"] == "blocked"
    assert finished["exit_code"] == EXIT_CHECKPOINT
    # the URL log has the ban pages, as blocked, with no attempt
    logged = [line for line in url_log(ws) if line["outcome"] == "blocked"]
    assert logged
    assert all(line["attempt"] is None for line in logged)

    shown = status_of(spec, ws)
    assert shown.returncode == EXIT_OK, shown.stdout + shown.stderr
    assert "matched the blocked rule captcha" in shown.stdout, shown.stdout
    as_json = json.loads(status_of(spec, ws, "--json").stdout)
    assert as_json["last_run"]["reason"] == "blocked"
    assert as_json["last_run"]["blocked"]["rule"] == "captcha"

    # still banned: the next run stops again, at once, storing nothing
    again = crawl(spec, ws)
    assert again.returncode == EXIT_CHECKPOINT, again.stderr[-3000:]
    assert workspace_items(ws) == stored

    site.lift()
    done = crawl(spec, ws)
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    assert workspace_items(ws) == truth(SOURCE)


@pytest.mark.process
def test_without_a_blocked_rule_the_ban_page_burns_rows(blocking_site, tmp_path):
    """The control: the same ban, no `blocked:` rule; the captcha pages become failed
    rows (so the test above would fail without the detector)."""
    site: BlockingSite = blocking_site(ban_after=10, ban="captcha")
    spec = write_spec(tmp_path, site.url, job="max_attempts: 1\n")
    ws = tmp_path / "ws"
    result = crawl(spec, ws)
    assert result.returncode != EXIT_CHECKPOINT
    assert not [e for e in events(ws) if e["event"] == "blocked"]
    assert any(v.get("error") for v in row_states(ws).values())


@pytest.mark.kill
@pytest.mark.slow
def test_a_redirect_to_a_captcha_stops_and_a_killed_resume_still_reaches_the_truth(
    blocking_site, tmp_path
):
    site: BlockingSite = blocking_site(ban_after=12, ban="redirect", delay=0.05)
    spec = write_spec(
        tmp_path,
        site.url,
        detail='  blocked: {url: "/captcha$"}\n',
        job='blocked: {url: "/captcha$"}\n',
    )
    ws = tmp_path / "ws"
    first = crawl(spec, ws)
    assert first.returncode == EXIT_CHECKPOINT, first.stderr[-3000:]
    assert "/captcha" in first.stderr
    before = assert_only_truth(ws)
    assert len(before) < ITEMS
    blocked = [e for e in events(ws) if e["event"] == "blocked"]
    assert blocked[0]["matched_url"] == f"{site.url}/captcha"

    site.lift()
    site.delay = 0.2  # slow enough that the kill lands mid-run
    # a kill -9 once the resumed crawl is fetching: nothing is lost or stored twice
    proc = procs.popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), "-s", "CONCURRENT_REQUESTS=4"],
        cwd=spec.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    lines = len(url_log(ws))
    deadline = time.monotonic() + 60
    while proc.poll() is None and len(url_log(ws)) <= lines + 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(random.Random(10).uniform(0.0, 0.3))
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert killed, "the crawl ended before the kill: slow the site down"
    done = crawl(spec, ws)
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    assert workspace_items(ws) == truth(SOURCE)
    # no row was fetched again once it was ok
    ok_rows = [line["row"] for line in url_log(ws) if line["outcome"] == "ok"]
    assert len(ok_rows) == len(set(ok_rows))


@pytest.mark.process
def test_a_redirect_to_an_off_site_captcha_is_a_soft_ban_not_an_offsite_error(
    blocking_site, tmp_path
):
    site: BlockingSite = blocking_site(ban_after=6, ban="offsite")
    spec = write_spec(tmp_path, site.url, job='blocked: {url: "/captcha$", name: captcha}\n')
    ws = tmp_path / "ws"
    result = crawl(spec, ws)
    assert result.returncode == EXIT_CHECKPOINT, result.stderr[-3000:]
    blocked = [e for e in events(ws) if e["event"] == "blocked"]
    assert len(blocked) == 1
    assert blocked[0]["matched_url"].startswith("http://localhost:")
    assert not any(v.get("error") for v in row_states(ws).values())
    assert site.seen["captcha"].requests == 0  # refused, never fetched
    assert_only_truth(ws)


@pytest.mark.process
def test_a_status_rule_counts_too(blocking_site, tmp_path):
    site: BlockingSite = blocking_site(ban_after=4, ban="status")
    spec = write_spec(tmp_path, site.url, job="blocked: {status: [403, 429]}\n")
    ws = tmp_path / "ws"
    result = crawl(spec, ws)
    assert result.returncode == EXIT_CHECKPOINT, result.stderr[-3000:]
    assert "status 403|429" in result.stderr
    assert not any(v.get("error") for v in row_states(ws).values())


def _response(url: str, body: bytes, status: int = 200, **headers: str) -> HtmlResponse:
    return HtmlResponse(url, status=status, body=body, headers=headers, encoding="utf-8")


def test_detector_rules_combine_their_conditions_and_name_themselves() -> None:
    spec = JobSpec.model_validate(
        {
            "name": "d",
            "source_type": "d",
            "start_urls": ["http://h/list"],
            "pages": {
                "list": {"follow": {"css": "a", "to": "item"}},
                "item": {
                    "id": "h1::text",
                    "blocked": {"status": 200, "css": "#captcha"},
                    "subtabs": {"tab": {"url": "/t/{id}", "fields": {"x": "p::text"}}},
                },
            },
            "blocked": [{"url": "/captcha", "name": "captcha redirect"}],
        }
    )
    det = Detector(spec, Guard(["h"]))
    captcha = b"<html><div id='captcha'></div></html>"
    assert det.check("item", _response("http://h/item/1", captcha)).rule == (
        "css '#captcha', status 200"
    )
    # all conditions of a rule must hold: the marker on a 404 is not this rule
    assert det.check("item", _response("http://h/item/1", captcha, status=404)) is None
    # the list kind has only the job's rule; the sub-tab has its kind's and the job's
    assert det.check("list", _response("http://h/list", captcha)) is None
    assert det.check("item.tab", _response("http://h/t/1", captcha)) is not None
    hit = det.check("list", _response("http://h/captcha?from=list", b"<html/>"))
    assert hit is not None
    assert hit.rule == "captcha redirect"
    # a redirect that was not followed: its target counts
    moved = _response("http://h/list", b"", status=302, Location="/captcha")
    assert det.check("list", moved).url == "http://h/captcha"
    assert det.check("list", _response("http://h/list", b"<html>fine</html>")) is None


def test_a_blocked_url_pattern_runs_within_the_time_limit(caplog):
    """A `url` pattern that backtracks (one validation does not catch) on a long URL
    runs on the bounded engine under FRAMEWORK_EXTRACT_TIMEOUT: taken as not matching
    and said, where Python's `re` held the crawl deaf to Ctrl-C (40 s on 40 characters,
    doubling with each one more)."""
    spec = JobSpec.model_validate(
        {
            "name": "d",
            "source_type": "d",
            "start_urls": ["http://h/list"],
            "pages": {"list": {"follow": {"css": "a", "to": "item"}}, "item": {"id": "h1::text"}},
            "blocked": [{"url": "(a|aa)+$", "name": "slow"}],
        }
    )
    guard = Guard(["h"])
    guard.limits = Limits(timeout=0.2)
    det = Detector(spec, guard)
    slow = "http://h/" + "a" * 60 + "!"  # 2**60 ways to split the a's before failing
    started = time.process_time()
    assert det.check("list", _response(slow, b"<html/>")) is None
    assert det.check_refused("list", slow) is None
    assert time.process_time() - started < 5
    assert "blocked rule slow: extraction ran over FRAMEWORK_EXTRACT_TIMEOUT" in caplog.text
    # the same pattern still matches where it matches
    assert det.check("list", _response("http://h/aaaa", b"<html/>")).rule == "slow"


# ------------------------------------------------------------------ rate limits
@pytest.mark.slow
@pytest.mark.process
def test_a_kinds_concurrency_is_what_the_site_sees(blocking_site, tmp_path):
    site: BlockingSite = blocking_site(delay=0.15)
    spec = write_spec(tmp_path, site.url, detail="  rate: {concurrency: 2}\n")
    result = crawl(spec, tmp_path / "ws")
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert site.seen["item"].requests == ITEMS
    assert site.details.max_in_flight <= 2

    # the control: without the rate, the same crawl has more details in flight
    control: BlockingSite = blocking_site(delay=0.15)
    spec = write_spec(tmp_path, control.url, name="fb-control")
    result = crawl(spec, tmp_path / "ws-control")
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert control.details.max_in_flight > 2


@pytest.mark.process
def test_a_kinds_rate_per_second_spaces_its_requests(blocking_site, tmp_path):
    site: BlockingSite = blocking_site()
    per_second = 8.0
    spec = write_spec(tmp_path, site.url, detail=f"  rate: {{per_second: {per_second}}}\n")
    result = crawl(spec, tmp_path / "ws")
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    arrivals = site.details.arrivals  # a redirect's next hop waits at the gate too
    assert len(arrivals) == ITEMS + ITEMS // 5
    interval = 1 / per_second
    # generous slack: one request reaching the server late shortens one gap; any five
    # starts in a row still span at least most of four intervals
    times = sorted(arrivals)
    spans = [b - a for a, b in zip(times, times[4:], strict=False)]
    assert min(spans) >= 0.6 * 4 * interval, spans
    # counted over the whole run: never more than the rate allows
    span = max(arrivals) - min(arrivals)
    assert span >= 0.8 * (len(arrivals) - 1) * interval, span


@pytest.mark.process
def test_a_job_rate_holds_for_every_kind_together(blocking_site, tmp_path):
    site: BlockingSite = blocking_site(delay=0.05)
    spec = write_spec(tmp_path, site.url, job="rate: {concurrency: 1}\n")
    result = crawl(spec, tmp_path / "ws")
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert site.seen["item"].requests == ITEMS
    # every page of the job through one slot (robots.txt is not counted in `pages`)
    assert site.pages.requests >= ITEMS + 5
    assert site.pages.max_in_flight == 1


def test_slots_settings_from_the_spec() -> None:
    spec = JobSpec.model_validate(
        {
            "name": "s",
            "source_type": "s",
            "start_urls": ["http://h/"],
            "pages": {
                "list": {
                    "follow": {"css": "a", "to": "item"},
                    "rate": {"per_second": 2, "concurrency": 1},
                },
                "item": {"id": "h1::text"},
            },
            "rate": {"concurrency": 3},
        }
    )
    slots = Slots(spec)
    assert set(slots.gates()) == {"kind:list", "job"}
    assert slots.meta("list") == {"fw_rate": "kind:list"}
    assert slots.meta("item") == {"fw_rate": "job"}
    gate = RateGate(slots.gates())
    assert gate.gates["kind:list"].interval == 0.5
    assert gate.gates["kind:list"].concurrency == 1
    assert gate.gates["job"].interval == 0.0
    assert gate.gates["job"].concurrency == 3


# ------------------------------------------------------------------ final URL
@pytest.mark.process
def test_the_url_log_has_the_requested_and_the_final_url_of_a_redirect(blocking_site, tmp_path):
    site: BlockingSite = blocking_site()
    spec = write_spec(tmp_path, site.url)
    ws = tmp_path / "ws"
    result = crawl(spec, ws)
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert workspace_items(ws) == truth(SOURCE)
    redirected = {line["url"]: line for line in url_log(ws) if "/go/" in line["url"]}
    assert sorted(redirected) == sorted(f"{site.url}/go/{n}" for n in range(5, ITEMS + 1, 5))
    for url, line in redirected.items():
        assert line["final_url"] == url.replace("/go/", "/item/")
        assert line["status"] == 200
        assert line["outcome"] == "ok"
    plain = [line for line in url_log(ws) if "/item/" in line["url"]]
    assert plain
    assert all(line["final_url"] == line["url"] for line in plain)


# ------------------------------------------------------------------ validate
BASE = """\
name: v
source_type: v
start_urls: ["http://127.0.0.1:1/list"]
"""


def validate(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "projects" / "v" / "job.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(BASE + body, encoding="utf-8")
    return run_cli("validate", str(spec), cwd=tmp_path)


def problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The `line:col: what` of each problem (the file name cut off)."""
    out = []
    for line in (result.stdout + result.stderr).splitlines():
        if "job.yaml:" in line:
            out.append(line.split("job.yaml:", 1)[1])
    return out


@pytest.mark.process
@pytest.mark.parametrize(
    ("body", "where", "says"),
    [
        (  # a sub-tab on a kind without id: never sent
            """\
pages:
  list:
    each: "li"
    fields: {name: "a::text"}
    follow: {css: "a::attr(href)", to: item}
    subtabs:
      extra: {url: "/x/{name}", fields: {x: "p::text"}}
  item:
    id: "h1::text"
""",
            "10:7:",
            "sub-tab 'extra' is never sent",
        ),
        (  # `to:` naming a sub-tab
            """\
pages:
  list:
    follow: {css: "a::attr(href)", to: rulings}
  item:
    id: "h1::text"
    subtabs:
      rulings: {url: "/r/{id}", fields: {x: "p::text"}}
""",
            "6:40:",
            "it is a sub-tab of 'item'",
        ),
        (  # follow rules on a JSON page are never applied
            """\
pages:
  api:
    format: json
    each: "$.rows[*]"
    id: {json: "$.id"}
    follow: {css: "a::attr(href)", to: item}
  item:
    id: "h1::text"
""",
            "9:13:",
            "follow rules of page kind 'api' are never applied",
        ),
        (  # pagination that can never fire
            """\
pages:
  list:
    each: "li"
    id: "a::text"
    pagination: {param: page, max_pages: 1}
""",
            "8:42:",
            "`max_pages: 1` never fetches a next page",
        ),
        (  # the short form's follow without a detail page
            """\
list:
  each: "li"
  id: "a::text"
  follow: "a::attr(href)"
""",
            "7:11:",
            "`follow` leads to the detail page, but the spec has no `detail:`",
        ),
        (  # a blocked rule that cannot match
            """\
blocked: [{css: "#captcha["}, {url: "("}, {status: 999}]
list:
  each: "li"
  id: "a::text"
""",
            "4:17:",
            "invalid CSS selector '#captcha['",
        ),
    ],
)
def test_validate_refuses_what_cannot_run(tmp_path, body, where, says):
    result = validate(tmp_path, body)
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    found = problems(result)
    assert any(p.startswith(where) and says in p for p in found), found


@pytest.mark.process
def test_validate_refuses_bad_rates_and_blocked_rules(tmp_path):
    result = validate(
        tmp_path,
        """\
rate: {}
blocked: [{url: "("}, {status: 999}, {name: nothing}]
list:
  each: "li"
  id: "a::text"
  rate: {per_second: 0}
""",
    )
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    text = "\n".join(problems(result))
    assert "a rate needs `per_second`, `concurrency` or both" in text
    assert "a blocked rule needs at least one of css, xpath, status or url" in text
    assert "greater than 0" in text


@pytest.mark.process
def test_validate_accepts_rates_and_blocked_rules(tmp_path):
    result = validate(
        tmp_path,
        """\
rate: {per_second: 4}
blocked:
  - {css: "form#captcha", name: captcha}
  - {url: "/captcha", status: [302, 200]}
list:
  each: "li"
  follow: "a::attr(href)"
  rate: {concurrency: 1}
detail:
  id: "h1::text"
  rate: {per_second: 0.5, concurrency: 2}
  blocked: {xpath: "//div[@id='ban']"}
  subtabs:
    tab: {url: "/t/{id}", fields: {x: "p::text"}, rate: {concurrency: 1}}
""",
    )
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
