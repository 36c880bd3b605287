"""``--metrics-port``: a running crawl and a running ship serve their job's /metrics
(the dashboard plugin's server, started by the core through ``framework.metrics``).

Real runs in child processes: a crawl of the demo site scraped while it runs (the
figures move), then the same server over the finished workspace agrees with
``framework status --json``; a ship held at the ingest door, scraped meanwhile. And a
crawl without the flag loads no metrics code at all."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from framework import plugins
from framework.crawl.metrics import MetricsServer
from framework.errors import UsageError
from framework.plugins import METRICS_HOST, serve_metrics
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli
from tests.paths import REPO
from tests.plugins.dashboard.helpers import get

JOB = "fixture-cases"
ANNOUNCED = re.compile(r"metrics: http://127\.0\.0\.1:(\d+)/metrics \(job fixture-cases\)")


# ------------------------------------------------------------------ helpers
class Lines:
    """A child's stream read line by line in a thread: waiting for a line has a
    deadline, and the child never blocks on a full pipe."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if (found := pattern.search(line)) is not None:
                return found
        raise AssertionError(f"no line matching {pattern.pattern!r}; saw:\n{''.join(self.seen)}")


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """/metrics parsed by prometheus-client: sample name -> labels (sorted) -> value."""
    status, headers, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def rows(m: dict[str, Any]) -> dict[tuple[str, str], int]:
    return {
        (dict(labels)["kind"], dict(labels)["state"]): int(v)
        for labels, v in m.get("framework_rows", {}).items()
    }


def one(m: dict[str, Any], name: str) -> float:
    (value,) = m[name].values()
    return float(value)


def status(root: Path) -> dict[str, Any]:
    r = run_cli("status", JOB, "--json", cwd=root)
    assert r.returncode in (0, 4), r.stderr
    report: dict[str, Any] = json.loads(r.stdout)
    return report


def refused(port: int) -> bool:
    try:
        get(f"http://127.0.0.1:{port}/metrics")
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


@contextmanager
def child(args: list[str], cwd: Path) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    proc = procs.popen(
        [*CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    try:
        yield proc, Lines(proc.stderr)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def agrees_with_status(m: dict[str, Any], report: dict[str, Any]) -> None:
    assert rows(m) == {
        (kind, state): counts[state]
        for kind, counts in report["rows"]["by_kind"].items()
        for state in ("pending", "ok", "error")
    }
    items = {dict(k)["state"]: int(v) for k, v in m["framework_items"].items()}
    assert items == {s: report["items"][s] for s in ("complete", "incomplete")}
    assert int(one(m, "framework_pages_total")) == report["last_run"]["counts"]["requests"]
    errors = sum(int(v) for v in m.get("framework_errors_total", {}).values())
    assert errors == report["last_run"]["counts"]["errors"]


@contextmanager
def served_after(root: Path) -> Iterator[int]:
    """The plugin's server over the finished workspace, in this process."""
    handle = serve_metrics(JOB, root / "var" / JOB, METRICS_HOST, 0)
    try:
        yield handle.port
    finally:
        handle.stop()
    assert refused(handle.port)  # stop() closed the socket


# ------------------------------------------------------------------ real runs
@pytest.mark.process
def test_a_crawl_serves_its_metrics_while_it_runs(
    make_site: Any, good_spec: Callable[..., Path], tmp_path: Path
) -> None:
    # slow enough pages that the crawl is still running over several scrapes
    site = make_site(cases=60, delay=0.05)
    good_spec("cases", site.url, tmp_path)
    pages: list[int] = []
    ok_rows: list[int] = []
    with child(["crawl", JOB, "--metrics-port", "0"], tmp_path) as (proc, lines):
        port = int(lines.wait_for(ANNOUNCED).group(1))
        deadline = time.monotonic() + 120
        # scrape until the figures have moved twice while the crawl still runs
        while len(set(pages)) < 3 and time.monotonic() < deadline:
            m = scrape(port)
            if proc.poll() is not None:
                break
            assert one(m, "framework_crawl_running") == 1.0
            assert one(m, "framework_job_up") == 1.0
            pages.append(int(one(m, "framework_pages_total")))
            ok_rows.append(sum(n for (_, state), n in rows(m).items() if state == "ok"))
        assert len(set(pages)) >= 3, f"pages_total never moved during the crawl: {pages}"
        assert pages == sorted(pages), "a counter went down"
        assert ok_rows == sorted(ok_rows)
        assert ok_rows[-1] > ok_rows[0]
        assert proc.wait(120) == 4  # the demo site's edge cases leave rows in error
    assert refused(port)  # the crawl closed its server when it closed
    report = status(tmp_path)
    assert pages[-1] <= report["last_run"]["counts"]["requests"]
    with served_after(tmp_path) as after:
        m = scrape(after)
    agrees_with_status(m, report)
    assert one(m, "framework_crawl_running") == 0.0


@pytest.mark.process
def test_a_ship_serves_its_metrics_while_it_ships(
    site: Any, good_spec: Callable[..., Path], ingest_server: Any, tmp_path: Path
) -> None:
    good_spec("cases", site.url, tmp_path)
    assert run_cli("crawl", JOB, "-q", cwd=tmp_path).returncode == 4
    crawled = status(tmp_path)
    # the door holds the first batch until the test has scraped the ship's /metrics
    door = threading.Event()
    held = threading.Event()
    store = ingest_server.store
    put_batch = store.put_batch

    def hold(entries: Any) -> Any:  # in the server's thread pool, not its event loop
        held.set()
        door.wait(60)
        return put_batch(entries)

    store.put_batch = hold
    try:
        args = ["ship", JOB, "--endpoint", ingest_server.url, "--metrics-port", "0", "-q"]
        with child(args, tmp_path) as (proc, lines):
            port = int(lines.wait_for(ANNOUNCED).group(1))
            assert held.wait(60), "the ship never reached the ingest door"
            during = scrape(port)
            door.set()
            assert proc.wait(120) == 0, "".join(lines.seen)
    finally:
        door.set()
        store.put_batch = put_batch
    agrees_with_status(during, crawled)  # the crawl's figures, served by the ship
    assert "framework_ship_attempts_total" not in during  # nothing answered yet
    assert refused(port)
    shipped = status(tmp_path)
    with served_after(tmp_path) as after:
        m = scrape(after)
    attempts = {dict(k)["outcome"]: int(v) for k, v in m["framework_ship_attempts_total"].items()}
    assert attempts == {"accepted": shipped["items"]["complete"]}
    keys = {dict(k)["outcome"]: int(v) for k, v in m["framework_ship_keys"].items()}
    assert keys == shipped["plugins"]["ship"]["latest_outcomes"]


_LOADED = """
import json, sys
from pathlib import Path
from framework.crawl.process import run_crawl
root = Path.cwd()
overrides = json.loads(sys.argv[1])
run_crawl(root / "projects" / "fixture-cases" / "job.yaml", root, overrides=overrides)
print(json.dumps(sorted(
    m for m in sys.modules if m.split(".")[0] in ("framework_dashboard", "prometheus_client")
)))
"""


@pytest.mark.process
@pytest.mark.parametrize("port", [None, 0], ids=["without", "with"])
def test_a_crawl_without_the_flag_loads_no_metrics_code(
    site: Any, good_spec: Callable[..., Path], tmp_path: Path, port: int | None
) -> None:
    good_spec("cases", site.url, tmp_path)
    overrides = {"LOG_LEVEL": "WARNING"}
    if port is not None:
        overrides["FRAMEWORK_METRICS_PORT"] = str(port)
    # a new interpreter, not the fork server: nothing imported before the crawl's own
    r = subprocess.run(
        [sys.executable, "-c", _LOADED, json.dumps(overrides)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout.strip().splitlines()[-1])
    if port is None:
        assert loaded == []
    else:  # the same check sees the plugin when it is asked for
        assert "framework_dashboard.metrics_server" in loaded
        assert "prometheus_client" in loaded


# ------------------------------------------------------------------ refusals
def test_the_extension_is_off_without_the_setting() -> None:
    with pytest.raises(NotConfigured):
        MetricsServer.from_crawler(get_crawler(Spider, {}))
    with pytest.raises(UsageError, match="expects a port number"):
        MetricsServer.from_crawler(get_crawler(Spider, {"FRAMEWORK_METRICS_PORT": "http"}))
    ext = MetricsServer.from_crawler(get_crawler(Spider, {"FRAMEWORK_METRICS_PORT": "0"}))
    assert ext.port == 0


def test_no_plugin_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda **_: [])
    with pytest.raises(UsageError) as caught:
        MetricsServer.from_crawler(get_crawler(Spider, {"FRAMEWORK_METRICS_PORT": "0"}))
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "\n" not in message
    assert "dashboard plugin" in message
    assert "pip install -e plugins/dashboard" in message


def test_a_taken_port_is_a_usage_error() -> None:
    first = serve_metrics(JOB, Path("/nonexistent"), METRICS_HOST, 0)
    try:
        with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            serve_metrics(JOB, Path("/nonexistent"), METRICS_HOST, first.port)
        # a workspace that is not there yet is a job that is not up, not an error
        assert scrape(first.port)["framework_job_up"] == {(("job", JOB),): 0.0}
    finally:
        first.stop()


@pytest.mark.process
def test_the_flag_is_the_operators_not_the_specs(
    site: Any, good_spec: Callable[..., Path], tmp_path: Path
) -> None:
    spec = good_spec("cases", site.url, tmp_path)
    with spec.open("a", encoding="utf-8") as f:
        f.write("settings:\n  FRAMEWORK_METRICS_PORT: 9100\n")
    r = run_cli("validate", JOB, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "FRAMEWORK_METRICS_PORT" in r.stdout + r.stderr
    good_spec("cases", site.url, tmp_path)  # a valid spec again
    both = run_cli("crawl", JOB, "--metrics-port", "0", "--processes", "2", cwd=tmp_path)
    assert both.returncode == 2
    assert "--metrics-port serves one crawl process" in both.stderr
