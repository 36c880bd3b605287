"""Take the dashboard's screenshots in docs/images from the demo job, for real.

    .venv/bin/python -m tests.plugins.dashboard.screenshots [--out docs/images]

The demo job (``projects/demo/job.yaml``, its start URL pointed at the demo site's real
port, as ``make demo`` does) in a project folder of its own, ``var/dashboard-demo`` of
the repository by default (made afresh: a folder it made before is wiped, any other
one that is not empty is refused; ``--folder`` names another): what the pages
show as "project" and "workspace" is that folder, never a temporary one. On 127.0.0.1
only, every server in this process and every command a child of it:

1. the demo site and the reference ingest endpoint (SQLite in the folder) start, and
   the dashboard over the folder (the app ``framework dashboard`` serves);
2. a crawl stops after 60 requests (``FRAMEWORK_MAX_REQUESTS``), its complete items
   are shipped; a second crawl goes 50 requests further, and a second ship sends the
   new items and skips the ones delivered;
3. with the job's page open in the project's Chromium (Playwright), the crawl resumes
   against a slower site: once pages/s has a curve and the ETA a value, the job's page
   is taken (``dashboard-job.png``, the whole page);
4. the crawl runs to its end, and the list of jobs is taken (``dashboard-jobs.png``).

Exit 0 with both files written, 2 when a step failed (the message says which).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from framework.demo.site import DemoSite
from framework.demo.tour import SPEC_PORT
from tests.fixtures.wait import wait_for

REPO = Path(__file__).resolve().parents[3]
JOB = "demo"
CLI = [sys.executable, "-c", "import sys; from framework.cli import main; sys.exit(main())"]
VIEWPORT = {"width": 1200, "height": 900}
FIRST_REQUESTS = 60  # the first crawl stops here: part of the items ship first
MORE_REQUESTS = 50  # the second crawl's: the second ship skips the first's
SLOW_DELAY = 0.25  # seconds per answer while the page is watched: a crawl of ~25 s
CHART_POINTS = 10  # samples of pages/s drawn before the job's page is taken
MAX_PNG = 300_000
MARKER = ".dashboard-screenshots"  # what lets a rerun wipe the folder


class Failed(Exception):
    pass


def _wait(what: str, condition: Callable[[], Any], within: float = 120) -> Any:
    try:
        return wait_for(condition, within, what)
    except AssertionError as exc:  # the script's one-line failure, not a traceback
        raise Failed(str(exc)) from None


def _framework(folder: Path, *args: str, ok: Sequence[int] = (0,)) -> None:
    print("$ framework", " ".join(args), flush=True)
    r = subprocess.run([*CLI, *args], cwd=folder, capture_output=True, text=True, check=False)
    if r.returncode not in ok:
        raise Failed(f"framework {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")


def _project(folder: Path, site_url: str) -> None:
    """A fresh project folder holding the demo job, pointed at the site's port. Only a
    folder this script made (its marker file in it) or an empty one is wiped first."""
    if folder.exists():
        if any(folder.iterdir()) and not (folder / MARKER).is_file():
            raise Failed(f"{folder} is not empty and not made by this script: name another")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / MARKER).write_text("made by tests.plugins.dashboard.screenshots\n")
    spec = (REPO / "projects" / JOB / "job.yaml").read_text(encoding="utf-8")
    needle = f"http://127.0.0.1:{SPEC_PORT}"
    if needle not in spec:
        raise Failed(f"projects/{JOB}/job.yaml no longer names {needle}")
    target = folder / "projects" / JOB / "job.yaml"
    target.parent.mkdir(parents=True)
    target.write_text(spec.replace(needle, site_url), encoding="utf-8")


def take(out: Path, folder: Path) -> list[Path]:
    from framework_dashboard.app import create_app
    from framework_dashboard.progress import Tracker
    from framework_dashboard.reader import Reader
    from framework_dashboard.serve import BackgroundServer
    from framework_ingest.app import create_app as ingest_app
    from framework_ingest.serve import BackgroundServer as IngestServer
    from framework_playwright.browser import find_chromium
    from playwright.sync_api import sync_playwright

    site = DemoSite().start()
    try:
        _project(folder, site.url)
        ingest = IngestServer(ingest_app(f"sqlite:///{folder / 'ingest.sqlite'}")).start()
        try:
            endpoint = ("--endpoint", ingest.url)
            limit = ("-s", f"FRAMEWORK_MAX_REQUESTS={FIRST_REQUESTS}")
            _framework(folder, "crawl", JOB, "-q", *limit, ok=(0, 3, 4))
            _framework(folder, "ship", JOB, *endpoint)
            limit = ("-s", f"FRAMEWORK_MAX_REQUESTS={MORE_REQUESTS}")
            _framework(folder, "crawl", JOB, "-q", *limit, ok=(0, 3, 4))
            _framework(folder, "ship", JOB, *endpoint)
        finally:
            ingest.stop()
        reader = Reader(folder, tracker=Tracker(min_interval=0.5))
        with (
            BackgroundServer(create_app(reader, interval=0.5)) as dashboard,
            sync_playwright() as pw,
        ):
            browser = pw.chromium.launch(
                executable_path=str(find_chromium()),
                headless=True,
                # nothing but 127.0.0.1: the page needs nothing from elsewhere
                proxy={"server": "http://127.0.0.1:9", "bypass": "127.0.0.1"},
            )
            try:
                return _shots(browser, dashboard.url, site, folder, out)
            finally:
                browser.close()
    finally:
        site.stop()


def _shots(browser: Any, base: str, site: DemoSite, folder: Path, out: Path) -> list[Path]:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{base}/jobs/{JOB}")
    page.wait_for_selector('#live[data-connected="yes"]')
    site.set_faults((), delay=SLOW_DELAY)
    slow = ("-s", "CONCURRENT_REQUESTS=2", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=2")
    print("$ framework crawl", JOB, "(resumed, watched)", flush=True)
    crawl = subprocess.Popen(
        [*CLI, "crawl", JOB, "-q", *slow],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def drawn() -> bool:
            points = page.get_attribute("#rate-line", "points") or ""
            eta = (page.text_content('#live [data-v="eta"]') or "").strip()
            return len(points.split()) >= CHART_POINTS and eta not in ("", "\N{EN DASH}")

        _wait("pages/s drawn and an ETA on the job's page", drawn)
        # the sections as they are now (the page reloads them every 10 s during a run)
        page.reload()
        page.wait_for_selector('#live[data-connected="yes"]')
        _wait("an ETA after the reload", drawn)
        job_png = out / "dashboard-job.png"
        page.screenshot(path=str(job_png), full_page=True)
        _, err = crawl.communicate(timeout=300)
        if crawl.returncode not in (0, 4):  # 4: the demo site breaks three pages
            raise Failed(f"the watched crawl exited {crawl.returncode}: {err[-2000:]}")
    finally:
        if crawl.poll() is None:
            crawl.kill()
            crawl.communicate(timeout=30)
    page.set_viewport_size({"width": 1280, "height": 240})  # the list is short
    page.goto(f"{base}/")
    page.wait_for_selector(f'tr[data-job="{JOB}"]')
    jobs_png = out / "dashboard-jobs.png"
    page.screenshot(path=str(jobs_png), full_page=True)
    return [job_png, jobs_png]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    parser.add_argument("--folder", type=Path, default=REPO / "var" / "dashboard-demo")
    args = parser.parse_args(argv)
    os.environ.pop("FRAMEWORK_WORKSPACE", None)  # the project's own var/, not the shell's
    try:
        written = take(args.out.resolve(), args.folder.resolve())
    except Failed as exc:
        print(f"screenshots: {exc}", file=sys.stderr)
        return 2
    for png in written:
        size = png.stat().st_size
        print(f"{png} ({size // 1000} KB)")
        if size > MAX_PNG:
            print(f"screenshots: {png} is over {MAX_PNG // 1000} KB", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
