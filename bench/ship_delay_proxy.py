"""A TCP proxy on 127.0.0.1 that adds a fixed delay to every chunk the client sends:
the latency of a remote ingest endpoint, in front of a local one (bench only).

    python bench/ship_delay_proxy.py --upstream 127.0.0.1:8700 --delay 0.02

Prints ``PORT <n>`` once listening. Each connection is forwarded independently, so
concurrent requests overlap their delays the way they would over a real network.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def main(port: int, upstream: str, delay: float) -> None:
    host, _, up_port = upstream.rpartition(":")

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, int(up_port))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            _pipe(client_r, server_w, delay),  # requests pay the delay
            _pipe(server_r, client_w, 0.0),
        )

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=512)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(args.port, args.upstream, args.delay))
