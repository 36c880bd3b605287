"""`make demo`: the whole product on the bundled court-case site, end to end.

1. serve the demo site on 127.0.0.1:8800 (the start URL of projects/demo/job.yaml);
2. `framework crawl demo --fresh` into var/demo/ (rows, items, URL and event logs);
3. print the stored items and `framework status demo`;
4. when the ingest and ship plugins are installed: serve the reference ingest endpoint
   on a free loopback port, `framework ship demo` to it, then ship again to show that a
   re-run skips everything that arrived.

Every step runs the real command line in a child process, so this module imports no
plugin (the core never does); the site runs in a thread of this process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

from framework.demo.site import DemoSite
from framework.project import find_root, workspace_path
from framework.workspace import Workspace

DEMO_PORT = 8800
JOB = "demo"


def _framework(*args: str, check: bool = False) -> int:
    cmd = [sys.executable, "-c", "import sys; from framework.cli import main; sys.exit(main())"]
    print(f"\n$ framework {' '.join(args)}", flush=True)
    code = subprocess.call([*cmd, *args])
    if check and code not in (0, 4):
        raise SystemExit(f"`framework {' '.join(args)}` exited {code}")
    return code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _show_items(ws_path: Path, limit: int = 3) -> None:
    with Workspace.open(ws_path, create=False, readonly=True) as ws:
        counts = ws.store.item_counts()
        print(
            f"\n{counts.get('complete', 0)} complete items, "
            f"{counts.get('incomplete', 0)} incomplete; the first {limit}:"
        )
        for n, item in enumerate(ws.store.iter_items(complete_only=True)):
            if n >= limit:
                break
            print(
                json.dumps(
                    {"dedupe_key": item.dedupe_key, **item.data}, indent=2, ensure_ascii=False
                )
            )


def _ship(root: Path) -> None:
    commands = {ep.name for ep in entry_points(group="framework.commands")}
    if not {"ingest", "ship"} <= commands:
        print("\n(ingest/ship plugins not installed: skipping delivery)")
        return
    port = _free_port()
    db = root / "var" / "demo-ingest.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    cmd = [sys.executable, "-c", "import sys; from framework.cli import main; sys.exit(main())"]
    print(f"\n$ framework ingest serve --db sqlite:///{db} --port {port} &", flush=True)
    server = subprocess.Popen(
        [*cmd, "ingest", "serve", "--db", f"sqlite:///{db}", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        _framework("ship", JOB, "--endpoint", endpoint)
        print("\n# again: everything already arrived, so every item is skipped")
        _framework("ship", JOB, "--endpoint", endpoint)
        _framework("status", JOB)
    finally:
        server.terminate()
        server.wait(10)


def main() -> int:
    root = find_root()
    os.chdir(root)
    try:
        site = DemoSite(port=DEMO_PORT).start()
    except OSError as exc:
        print(f"cannot serve the demo site on 127.0.0.1:{DEMO_PORT}: {exc}", file=sys.stderr)
        return 2
    try:
        print(f"demo site: {site.url}/cases  (70 cases, 3 AJAX sub-tabs each, a few broken pages)")
        code = _framework("crawl", JOB, "--fresh", "-L", "WARNING")
        print(
            f"(crawl exit code {code}: 4 means some rows ended in error, as the demo site "
            "breaks a few pages on purpose)"
        )
        _show_items(workspace_path(root, JOB))
        _framework("status", JOB)
        _ship(root)
    finally:
        site.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
