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
        # The contract's answer names each item's key (the shipper trusts nothing less).
        if self.path.endswith("/batch"):
            results = [
                {"status": "accepted", "status_code": 201, "dedupe_key": e.get("dedupe_key")}
                for e in json.loads(raw)
            ]
            body = json.dumps({"results": results}).encode()
            code = 200
        else:
            key = json.loads(raw).get("dedupe_key")
            body, code = json.dumps({"status": "accepted", "dedupe_key": key}).encode(), 201
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
