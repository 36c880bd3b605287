"""`framework demo`: the tour of :mod:`framework.demo.tour` (what `make demo` runs)."""

from __future__ import annotations

import click


@click.command("demo")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve the demo site on this port. [$DEMO_PORT; default: a free port]",
)
def demo(port: int | None) -> int:
    """Crawl the bundled demo site, crash the crawl, resume it, ship twice, and sum up.

    Everything runs on 127.0.0.1 in a new temporary folder (printed, and kept).
    Exit 0 when every step ran, 2 when one could not, 130 on Ctrl-C.
    """
    from framework.demo.tour import main

    return main(port)
