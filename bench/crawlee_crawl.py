"""crawlee-python's twin of bench/specs/bench.yaml: the same extraction, a ParselCrawler.

The list pages (``/cases``, ``a.next``) are followed to every case's detail page; each
detail page gives one item with the fields and normalisation of the spec (and of
bench/handwritten_spider.py, whose helpers it reuses). 16 requests in flight (fixed:
min = desired = max concurrency), robots.txt obeyed, as the framework's crawl.

``--storage memory`` keeps the request queue and the dataset in memory (nothing
survives a kill); ``--storage file`` is crawlee's file storage (``--dir``), its
persistent mode. The items are written to ``--out`` as JSON lines at the end, for
bench/bench_spider.py to compare with the other crawlers' feeds.

    .venv/bin/python bench/crawlee_crawl.py http://127.0.0.1:PORT --storage memory --out items.jsonl

crawlee is a bench-only dependency: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from handwritten_spider import case_item

IN_FLIGHT = 16


async def crawl(base: str, storage: str, folder: Path | None, out: Path) -> int:
    from crawlee import ConcurrencySettings, Request, service_locator
    from crawlee.configuration import Configuration
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
    from crawlee.storage_clients import FileSystemStorageClient, MemoryStorageClient

    config = Configuration(purge_on_start=True)
    if storage == "file":
        assert folder is not None
        config = Configuration(purge_on_start=True, storage_dir=str(folder))
        client: Any = FileSystemStorageClient()
    else:
        client = MemoryStorageClient()
    service_locator.set_configuration(config)
    service_locator.set_storage_client(client)
    crawler = ParselCrawler(
        configuration=config,
        storage_client=client,
        concurrency_settings=ConcurrencySettings(
            min_concurrency=IN_FLIGHT, desired_concurrency=IN_FLIGHT, max_concurrency=IN_FLIGHT
        ),
        max_request_retries=2,  # 3 attempts, as the framework's max_attempts
        respect_robots_txt_file=True,
        configure_logging=False,
    )

    @crawler.router.default_handler
    async def list_page(ctx: ParselCrawlingContext) -> None:
        links = ctx.selector.css("table.cases tbody tr a.detail::attr(href)").getall()
        requests = [Request.from_url(_join(ctx, h), label="case") for h in links]
        nxt = ctx.selector.css("a.next::attr(href)").get()
        if nxt:
            requests.append(Request.from_url(_join(ctx, nxt)))
        await ctx.add_requests(requests)

    @crawler.router.handler("case")
    async def case_page(ctx: ParselCrawlingContext) -> None:
        item = case_item(ctx.selector)
        if item is None:
            ctx.log.warning("missing required field on %s", ctx.request.url)
            return
        await ctx.push_data(item)

    await crawler.run([f"{base.rstrip('/')}/cases"])
    dataset = await crawler.get_dataset()
    n = 0
    with out.open("w") as f:
        async for item in dataset.iterate_items():
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
            n += 1
    return n


def _join(ctx: Any, href: str) -> str:
    from urllib.parse import urljoin

    return urljoin(ctx.request.loaded_url or ctx.request.url, href)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the bench site's base URL")
    parser.add_argument("--storage", choices=("memory", "file"), default="memory")
    parser.add_argument("--dir", type=Path, help="crawlee's storage folder (file storage)")
    parser.add_argument("--out", type=Path, required=True, help="items as JSON lines")
    args = parser.parse_args()
    if args.storage == "file" and args.dir is None:
        parser.error("--storage file needs --dir")
    logging.basicConfig(level=logging.WARNING)
    n = asyncio.run(crawl(args.base, args.storage, args.dir, args.out))
    print(f"items: {n}", file=sys.stderr)


if __name__ == "__main__":
    main()
