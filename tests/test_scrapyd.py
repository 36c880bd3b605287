"""A YAML project on Scrapyd: deployed with scrapyd-deploy, scheduled, cancelled, resumed.

The real ``scrapyd`` runs as a child process on a free loopback port, with its eggs,
logs and queues under the test's folder; the real ``scrapyd-deploy`` builds the egg of
tests/fixtures/scrapyd_project (its setup.py puts the job specs in the egg) and uploads
it. A cancel is Scrapyd's SIGINT to the crawl: a checkpoint, which the next schedule of
the same job resumes in the same workspace (FRAMEWORK_WORKSPACES).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from scrapy.settings import Settings

from framework.crawl.loader import JobSpiderLoader
from framework.errors import FrameworkError, UsageError
from framework.project import job_files, packaged_root
from framework.workspace import RowStatus, Workspace
from tests.fixtures.crawl import run_cli, url_log, workspace_items
from tests.fixtures.server import closed_port
from tests.paths import TESTS

FIXTURE = TESTS / "fixtures" / "scrapyd_project"
PROJECT = "demo_jobs"  # [deploy] project in the fixture's scrapy.cfg
JOB = "demo"
DEADLINE = 120.0  # seconds, for any one wait: a loaded CI machine, never a fixed sleep


# ------------------------------------------------------------- specs in a zip
def _zipped_package(tmp_path: Path, package: str, files: dict[str, str]) -> Path:
    egg = tmp_path / f"{package}.egg"
    with zipfile.ZipFile(egg, "w") as zf:
        zf.writestr(f"{package}/__init__.py", "")
        for name, text in files.items():
            zf.writestr(f"{package}/{name}", text)
    return egg


@pytest.fixture
def forget_modules() -> Iterator[Callable[[str], None]]:
    names: list[str] = []
    yield names.append
    for name in names:
        sys.modules.pop(name, None)


def test_specs_travel_in_a_zipped_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_modules: Callable[[str], None]
) -> None:
    spec = "name: zipped\nsource_type: t\nstart_urls: [http://127.0.0.1/]\ndetail: {id: h1}\n"
    egg = _zipped_package(tmp_path, "fw_zipped_specs", {"projects/one/job.yaml": spec})
    monkeypatch.syspath_prepend(str(egg))
    forget_modules("fw_zipped_specs")
    root = packaged_root("fw_zipped_specs")
    assert root is not None
    assert not str(root).startswith(str(egg))  # a real folder: specs are read by path
    jobs = job_files(root)
    assert list(jobs) == ["zipped"]
    assert jobs["zipped"].read_text() == spec

    # Scrapy's spider loader, as a crawl under Scrapyd builds it: the egg's jobs, and
    # workspaces in the working directory's var/ (Scrapyd's own), or where the setting says
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FRAMEWORK_HOME", raising=False)
    loader = JobSpiderLoader.from_settings(Settings({"FRAMEWORK_SPECS_PACKAGE": "fw_zipped_specs"}))
    assert loader.list() == ["zipped"]
    assert loader.workspace_root == tmp_path / "var"
    elsewhere = tmp_path / "workspaces"
    loader = JobSpiderLoader.from_settings(
        Settings({"FRAMEWORK_SPECS_PACKAGE": "fw_zipped_specs", "FRAMEWORK_WORKSPACES": elsewhere})
    )
    assert loader.workspace_root == elsewhere
    assert loader.load("zipped").custom_settings["JOBDIR"] == str(elsewhere / "zipped")


def test_a_package_without_specs_leaves_the_project_root_to_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_modules: Callable[[str], None]
) -> None:
    egg = _zipped_package(tmp_path, "fw_no_specs", {"settings.py": "X = 1\n"})
    monkeypatch.syspath_prepend(str(egg))
    forget_modules("fw_no_specs")
    assert packaged_root("fw_no_specs") is None
    with pytest.raises(UsageError, match="FRAMEWORK_SPECS_PACKAGE"):
        packaged_root("fw_no_such_package_anywhere")


# ------------------------------------------------------------- the real Scrapyd
class Scrapyd:
    """A ``scrapyd`` child process in ``home`` (its eggs, logs and dbs there)."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        home.mkdir()
        # Scrapyd reads scrapyd.conf from its working directory; a short poll interval
        # so a schedule starts at once rather than within the default 5 s.
        (home / "scrapyd.conf").write_text(
            "[scrapyd]\n"
            "bind_address = 127.0.0.1\n"
            f"http_port = {self.port}\n"
            "eggs_dir = eggs\nlogs_dir = logs\ndbs_dir = dbs\n"
            "items_dir =\njobs_dir =\n"
            "max_proc = 1\npoll_interval = 0.2\n"
        )
        self.output = home / "scrapyd.out"
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scrapyd"],
                cwd=home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait(self._up, "scrapyd to answer daemonstatus.json", self.tail)

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"scrapyd exited {self.proc.returncode}:\n{self.tail()}")
        try:
            return self.get("daemonstatus.json")["status"] == "ok"
        except requests.ConnectionError:
            return False

    def tail(self) -> str:
        return self.output.read_text(errors="replace")[-4000:]

    def get(self, endpoint: str, **params: str) -> dict[str, Any]:
        answer: dict[str, Any] = requests.get(self.url + endpoint, params=params, timeout=30).json()
        return answer

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
        answer: dict[str, Any] = requests.post(self.url + endpoint, data=fields, timeout=30).json()
        assert answer.get("status") == "ok", (endpoint, answer, self.tail())
        return answer

    def schedule(self, settings: dict[str, str]) -> str:
        fields = [("project", PROJECT), ("spider", JOB)]
        fields += [("setting", f"{k}={v}") for k, v in settings.items()]
        return str(self.post("schedule.json", fields)["jobid"])

    def finished(self, job: str) -> bool:
        jobs = self.get("listjobs.json", project=PROJECT)
        return any(j["id"] == job for j in jobs["finished"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


@pytest.fixture
def scrapyd_env() -> dict[str, str]:
    """The environment of scrapyd and scrapyd-deploy: nothing that would point them at
    this repository (its projects/, its settings) instead of the egg."""
    drop = {"FRAMEWORK_HOME", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "PYTHONPATH"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture
def scrapyd(tmp_path: Path, scrapyd_env: dict[str, str]) -> Iterator[Scrapyd]:
    server = Scrapyd(tmp_path / "scrapyd", scrapyd_env)
    try:
        yield server
    finally:
        server.stop()


def _wait(ready: Callable[[], bool], what: str, why: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {DEADLINE:.0f} s\n{why()}")
        time.sleep(0.1)


def _project(tmp_path: Path, site_url: str, scrapyd_url: str) -> Path:
    """The fixture project, copied (scrapyd-deploy builds in it), its start URL on the
    demo site's real port and its [deploy] url on the Scrapyd started for the test."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    job = project / "projects" / JOB / "job.yaml"
    text = job.read_text(encoding="utf-8")
    assert "http://127.0.0.1:8800" in text
    job.write_text(text.replace("http://127.0.0.1:8800", site_url.rstrip("/")), encoding="utf-8")
    cfg = project / "scrapy.cfg"
    text = cfg.read_text(encoding="utf-8")
    assert "url = http://127.0.0.1:6800/" in text
    cfg.write_text(text.replace("url = http://127.0.0.1:6800/", f"url = {scrapyd_url}"))
    return project


def _row_counts(ws: Path) -> dict[RowStatus, int]:
    """Rows by status, all kinds together; nothing while the workspace is not there yet."""
    try:
        with Workspace.open(ws, create=False, readonly=True) as w:
            counts = w.store.row_counts()
    except FrameworkError:
        return {}  # no workspace yet: the crawl has not opened it
    total: dict[RowStatus, int] = {}
    for per_kind in counts.values():
        for status, n in per_kind.items():
            total[status] = total.get(status, 0) + n
    return total


def _assert_no_ok_row_fetched_again(ws: Path) -> None:
    """Every fetch of the workspace's URL log, in order: none of a row already ok."""
    ok: set[int] = set()
    for line in url_log(ws):
        assert line["row"] not in ok, f"row {line['row']} ({line['url']}) fetched again"
        if line["outcome"] == "ok":
            ok.add(line["row"])


@pytest.mark.process
@pytest.mark.kill
@pytest.mark.slow
def test_scrapyd_deploy_schedule_cancel_and_resume(
    make_site: Callable[..., Any],
    scrapyd: Scrapyd,
    scrapyd_env: dict[str, str],
    tmp_path: Path,
) -> None:
    # No broken pages (every row can end ok); slow enough that a cancel lands mid-run.
    site = make_site(edge_cases=False, delay=0.1)
    project = _project(tmp_path, site.url, scrapyd.url)

    deploy = subprocess.run(
        [sys.executable, "-m", "scrapyd_client.deploy"],
        cwd=project,
        env=scrapyd_env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert deploy.returncode == 0, deploy.stderr + deploy.stdout
    assert scrapyd.get("listspiders.json", project=PROJECT)["spiders"] == [JOB]

    ws = tmp_path / "workspaces" / JOB
    settings = {
        "FRAMEWORK_WORKSPACES": str(tmp_path / "workspaces"),
        "CONCURRENT_REQUESTS": "4",
    }
    first = scrapyd.schedule(settings)
    _wait(
        lambda: _row_counts(ws).get(RowStatus.OK, 0) >= 20,
        "ok rows in the workspace of the first run",
        scrapyd.tail,
    )
    cancel = scrapyd.post("cancel.json", [("project", PROJECT), ("job", first)])  # SIGINT
    assert cancel["prevstate"] == "running", cancel
    _wait(lambda: scrapyd.finished(first), "end of the cancelled run", scrapyd.tail)
    log = scrapyd.home / "logs" / PROJECT / JOB / f"{first}.log"
    assert log.is_file(), scrapyd.tail()
    cancelled = _row_counts(ws)
    # the cancel stopped a run with work left: else the second run resumes nothing
    assert cancelled.get(RowStatus.PENDING, 0) > 0, (cancelled, log.read_text()[-3000:])
    assert cancelled.get(RowStatus.ERROR, 0) == 0, log.read_text()[-3000:]
    fetched_before = len(url_log(ws))

    second = scrapyd.schedule(settings)
    _wait(lambda: scrapyd.finished(second), "end of the resumed run", scrapyd.tail)
    done = _row_counts(ws)
    second_log = (scrapyd.home / "logs" / PROJECT / JOB / f"{second}.log").read_text()
    assert set(done) == {RowStatus.OK}, (done, second_log[-3000:])
    assert len(url_log(ws)) > fetched_before  # the second run fetched what was left
    _assert_no_ok_row_fetched_again(ws)

    reference = tmp_path / "reference"
    plain = run_cli("crawl", JOB, "--workspace", str(reference), "-L", "WARNING", cwd=project)
    assert plain.returncode == 0, plain.stderr[-3000:]
    items = workspace_items(ws)
    assert items == workspace_items(reference)
    assert sorted(i["source_id"] for i in items.values()) == sorted(site.truth.ids)
