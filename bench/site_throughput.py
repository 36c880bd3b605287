"""How fast the demo site serves, against the plain alternative, in the same run.

Serves the same pre-rendered pages two ways, each in its own process:

* ``asyncio``: the demo site as shipped (``python -m framework.demo.site``);
* ``threading``: ``http.server.ThreadingHTTPServer`` with HTTP/1.1 keep-alive, a thread
  per connection, answering from the same pre-rendered route table.

A load process keeps ``--connections`` keep-alive connections busy fetching detail pages
for ``--seconds``; we report requests/s and the server's CPU seconds per 1,000 requests
(the figure that matters when Scrapy and the site share two cores). Loopback only; every
process is stopped at the end.

    .venv/bin/python bench/site_throughput.py [--cases 5000] [--seconds 5] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from framework.demo.data import generate  # noqa: E402
from framework.demo.pages import render  # noqa: E402


def serve_threading(cases: int) -> None:
    """The plain alternative: stdlib ThreadingHTTPServer, HTTP/1.1 keep-alive."""
    data = generate(cases)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    routes = render(data, base)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Without it, headers and body go out in two segments and Nagle + delayed ACK
        # cap each connection at ~25 requests/s: tuned as a user would tune it.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            page = routes.get(f"GET {self.path}")
            if page is None:
                self.send_error(404)
                return
            self.send_response(page.status)
            self.send_header("Content-Type", page.content_type)
            self.send_header("Content-Length", str(len(page.body)))
            self.end_headers()
            self.wfile.write(page.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server.RequestHandlerClass = Handler
    server.daemon_threads = True
    print(base, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


async def _load(base: str, paths: list[str], seconds: float, connections: int) -> int:
    host, port = base.removeprefix("http://").split(":")
    deadline = time.monotonic() + seconds
    done = 0

    async def worker(offset: int) -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection(host, int(port))
        i = offset
        while time.monotonic() < deadline:
            path = paths[i % len(paths)]
            i += connections
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            done += 1
        writer.close()

    await asyncio.gather(*(worker(k) for k in range(connections)))
    return done


def load(base: str, cases: int, seconds: float, connections: int) -> None:
    paths = [f"/cases/C2024-{i:04d}" for i in range(1, cases + 1)]
    done = asyncio.run(_load(base, paths, seconds, connections))
    print(json.dumps({"requests": done}), flush=True)


def measure(kind: str, cases: int, seconds: float, connections: int) -> dict[str, float]:
    if kind == "asyncio":
        argv = [sys.executable, "-m", "framework.demo.site", "--cases", str(cases)]
    else:
        argv = [sys.executable, __file__, "--serve-threading", "--cases", str(cases)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        base = server.stdout.readline().strip()
        proc = psutil.Process(server.pid)
        cpu0 = sum(proc.cpu_times()[:2])
        started = time.monotonic()
        out = subprocess.run(
            [
                *(sys.executable, __file__, "--load", base, "--cases", str(cases)),
                *("--seconds", str(seconds), "--connections", str(connections)),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.monotonic() - started
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        requests = json.loads(out.stdout.strip().splitlines()[-1])["requests"]
    finally:
        server.terminate()
        server.wait(10)
    return {
        "requests": requests,
        "req_per_s": requests / seconds,
        "server_cpu_ms_per_1k": 1e6 * cpu / max(requests, 1),
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve-threading", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load", metavar="BASE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_threading:
        serve_threading(args.cases)
        return
    if args.load:
        load(args.load, args.cases, args.seconds, args.connections)
        return
    command = "bench/site_throughput.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    results: dict[str, list[dict[str, float]]] = {"asyncio": [], "threading": []}
    for _ in range(args.rounds):  # alternate, so drift hits both alike
        for kind in results:
            results[kind].append(measure(kind, args.cases, args.seconds, args.connections))
    print(f"command: .venv/bin/python {command}")
    print(f"load: 1 client process, {args.connections} keep-alive connections, detail pages")
    print(f"{'server':<10} {'req/s (best)':>13} {'server CPU ms per 1k req':>26}")
    for kind, runs in results.items():
        best = max(runs, key=lambda r: r["req_per_s"])
        print(f"{kind:<10} {best['req_per_s']:>13.0f} {best['server_cpu_ms_per_1k']:>26.0f}")


if __name__ == "__main__":
    main()
