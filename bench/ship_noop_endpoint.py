"""A minimal ingest look-alike for the 1,000,000-item memory run (bench only): it
answers ``POST .../items`` with 201 and ``POST .../items/batch`` with one "accepted"
result per element, storing nothing, so the run measures the shipper, not a database.

    python bench/ship_noop_endpoint.py        # prints ``PORT <n>``
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, Nagle holds the body until
    # the client's delayed ACK (40 ms a request), and we would measure that instead.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/batch"):
            # Counting elements is enough: one result per element, in order.
            n = len(json.loads(raw))
            body = (
                b'{"results":['
                + b",".join([b'{"status":"accepted","status_code":201}'] * n)
                + b"]}"
            )
            code = 200
        else:
            body, code = b'{"status":"accepted"}', 201
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
