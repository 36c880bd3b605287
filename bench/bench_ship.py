"""Shipping benchmarks, each against its plain alternative in the same run.

    .venv/bin/python bench/bench_ship.py                 # all five (several minutes)
    .venv/bin/python bench/bench_ship.py --quick         # smaller sizes, a smoke run
    .venv/bin/python bench/bench_ship.py --only memory --memory-items 1000000

1. one-by-one: ``Shipper`` with ``--batch-size 1`` against the reference ingest server
   (``framework ingest serve``, SQLite, its own process) vs a plain ``requests.Session``
   loop POSTing the same kind of item bodies with the same headers (bodies built
   before its clock starts; the shipper's time includes reading the workspace, the
   ship log and its index), and vs that loop with ``trust_env`` off (the shipper reads
   the environment once per run). They rotate in slices against one server, each slice
   new keys, so the machine's drifting load hits all alike; the figure is the median
   of the per-slice ratios. Target >= 95%.
2. batches of 100 vs one-by-one, both through ``Shipper``. Target >= 10x.
3. 20 ms of added latency (bench/ship_delay_proxy.py in front of the server):
   ``--concurrency 8`` vs ``--concurrency 1`` (one by one). Target >= 5x.
4. peak memory of ``framework ship`` (a real subprocess reporting its own
   ``ru_maxrss``) over 1,000,000 stored items, to the no-op endpoint
   (bench/ship_noop_endpoint.py: the reference server's SQLite would only make it
   slower, not bigger), first run and re-run (all skipped). Target < 200 MB.
5. overhead: client CPU time per item one by one with requests' transport stubbed
   in-process (no server): the shipper's own work next to the plain loops'.

Measurements 2-3 ship to a freshly started server (an empty database) each. Figures
are wall clock on whatever machine runs it; the machine is shared, so pairs are
measured back to back in rotating order and the best of ``--repeat`` rounds is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from framework_ship.client import idempotency_key  # noqa: E402
from framework_ship.deliver import item_body  # noqa: E402
from framework_ship.run import ShipOptions, Shipper  # noqa: E402

from framework.workspace import ItemWrite, NewRow, Outcome, Workspace  # noqa: E402

BIN = Path(sys.executable).parent
CHUNK = 10_000


def build_workspace(path: Path, n: int, source_type: str = "bench") -> Path:
    """n items of ~300 bytes, written through the store's public writer."""
    with Workspace.open(path) as ws:
        for start in range(0, n, CHUNK):
            (row,) = ws.store.seed([NewRow(kind="detail", url=f"http://bench.test/{start}")])
            items = [
                ItemWrite(
                    f"{source_type}:{i:07d}",
                    source_type,
                    f"{i:07d}",
                    {"title": f"case {i}", "n": i, "court": "district", "body": "x" * 200},
                )
                for i in range(start, min(n, start + CHUNK))
            ]
            ws.store.commit(Outcome(row_id=row.id, ok=True, items=items))
    return path


def _read_port(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("PORT "):
            return int(line.split()[1])
    raise RuntimeError("the helper process did not report its port")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the ingest server exited: {log.read_text()[-2000:]}")
        try:
            requests.get(url + "/healthz", timeout=1).raise_for_status()
            return
        except requests.RequestException:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@contextlib.contextmanager
def ingest_server(tmp: Path) -> Iterator[str]:
    """The reference server in its own process on a fresh SQLite database."""
    port = _free_port()
    db = tmp / f"ingest-{time.monotonic_ns()}.db"
    log = db.with_suffix(".log")
    proc = subprocess.Popen(
        [
            str(BIN / "framework"),
            "ingest",
            "serve",
            "--db",
            f"sqlite:///{db}",
            "--port",
            str(port),
            "--no-access-log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def helper(*args: str) -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        yield _read_port(proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def plain_post(bodies: list[dict[str, Any]], url: str, trust_env: bool = True) -> float:
    """Seconds a bare requests.Session loop takes to POST ``bodies`` one by one with
    the contract's headers (what the shipper sends, minus everything else it does).
    ``trust_env=False`` is the same loop without requests' per-request reading of the
    environment (proxy variables, ~/.netrc), which the shipper reads once per run."""
    session = requests.Session()
    session.trust_env = trust_env
    started = time.perf_counter()
    for body in bodies:
        response = session.post(
            url + "/v1/items",
            data=json.dumps(body, separators=(",", ":")).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key(body)},
            timeout=30,
        )
        response.raise_for_status()
    return time.perf_counter() - started


def ship_seconds(ws_path: Path, url: str, **options: Any) -> float:
    with Workspace.open(ws_path) as ws:
        shipper = Shipper(ws, ShipOptions(endpoint=url, **options), echo=lambda line: None)
        started = time.perf_counter()
        summary = shipper.run()
        elapsed = time.perf_counter() - started
    assert summary.exit_code == 0, summary.line()
    assert summary.counts["accepted"] > 0, summary.line()
    return elapsed


def bench_one_by_one(tmp: Path, n: int, rounds: int) -> dict[str, float]:
    """Interleaved slices against ONE server: the machine's load drifts, so the plain
    loop, the shipper and the plain loop without environment reading alternate (in a
    rotating order) every ``n / rounds`` items, each slice on new keys (all three only
    insert). Reported: the median over slices of each slice's ratio (a burst of load
    from another process spoils one slice, not the figure), and the ratio of totals."""
    per = n // rounds
    n = per * rounds
    kinds = ("plain", "ship", "plain-noenv")
    seconds: dict[str, list[float]] = {k: [] for k in kinds}
    # Client CPU time (this process; the server is another): what the shipper's own
    # work costs per item, which a loaded machine's scheduling noise does not blur.
    cpu: dict[str, float] = dict.fromkeys(kinds, 0.0)
    with ingest_server(tmp) as url:
        for r in range(rounds):
            ws = build_workspace(tmp / f"ws-ship-{r}", per, source_type=f"ship{r}")
            bodies: dict[str, list[dict[str, Any]]] = {}
            for kind in ("plain", "plain-noenv"):
                path = build_workspace(tmp / f"ws-{kind}-{r}", per, source_type=f"{kind}{r}")
                with Workspace.open(path, readonly=True) as w:
                    bodies[kind] = [item_body(i) for i in w.store.iter_items()]
            order = kinds[r % 3 :] + kinds[: r % 3]
            for kind in order:
                started = time.process_time()
                if kind == "ship":
                    seconds[kind].append(ship_seconds(ws, url, batch_size=1))
                else:
                    seconds[kind].append(plain_post(bodies[kind], url, kind == "plain"))
                cpu[kind] += time.process_time() - started
    rate = {k: per * rounds / sum(v) for k, v in seconds.items()}
    ratio = statistics.median(p / s for p, s in zip(seconds["plain"], seconds["ship"], strict=True))
    ratio_noenv = statistics.median(
        p / s for p, s in zip(seconds["plain-noenv"], seconds["ship"], strict=True)
    )
    print(f"1. one-by-one, {per * rounds} items each in {rounds} rotating slices against one "
          f"server:\n   plain Session loop {rate['plain']:,.0f} items/s, framework ship "
          f"--batch-size 1 {rate['ship']:,.0f} items/s: median of the slice ratios "
          f"{ratio:.0%} (of the totals {rate['ship'] / rate['plain']:.0%}; target >= 95%)\n"
          f"   plain loop with trust_env off {rate['plain-noenv']:,.0f} items/s: ship is "
          f"{ratio_noenv:.0%} of it (median; of the totals "
          f"{rate['ship'] / rate['plain-noenv']:.0%})\n"
          f"   client CPU per item: plain {cpu['plain'] / n * 1e6:.0f} us, ship "
          f"{cpu['ship'] / n * 1e6:.0f} us, plain with trust_env off "
          f"{cpu['plain-noenv'] / n * 1e6:.0f} us\n"
          "   slice ratios ship/plain: " + ", ".join(
              f"{p / s:.2f}" for p, s in zip(seconds["plain"], seconds["ship"], strict=True)
          ))  # fmt: skip
    return {"plain": rate["plain"], "ship_single": rate["ship"], "ratio_median": ratio}


@contextlib.contextmanager
def stub_transport() -> Iterator[None]:
    """requests answers every POST in-process with the contract's 201, no socket: what
    remains is the client's own CPU work per item."""
    from requests.adapters import HTTPAdapter
    from requests.models import Response

    def send(self: HTTPAdapter, request: Any, **kwargs: Any) -> Response:
        sent = json.loads(request.body)
        response = Response()
        response.status_code = 201
        response._content = json.dumps(
            {"status": "accepted", "dedupe_key": sent["dedupe_key"], "version": 1}
        ).encode()
        response.headers["Content-Type"] = "application/json"
        response.url, response.request = request.url, request
        return response

    original = HTTPAdapter.send
    HTTPAdapter.send = send  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        HTTPAdapter.send = original  # type: ignore[method-assign]


def bench_overhead(tmp: Path, n: int, rounds: int) -> dict[str, float]:
    """Client CPU time per item with the transport stubbed out (no server, no network):
    the shipper's own work one by one next to the plain loops'. CPU time, not wall
    clock, and no server: the figure the shared machine's load disturbs least."""
    cpu: dict[str, list[float]] = {"plain": [], "ship": [], "plain-noenv": []}
    url = "http://127.0.0.1:9"
    with stub_transport():
        for r in range(rounds):
            ws = build_workspace(tmp / f"ws-over-ship-{r}", n, source_type=f"oship{r}")
            with Workspace.open(ws, readonly=True) as w:
                bodies = [item_body(i) for i in w.store.iter_items()]
            for kind in ("plain", "ship", "plain-noenv"):
                started = time.process_time()
                if kind == "ship":
                    ship_seconds(ws, url, batch_size=1)
                else:
                    plain_post(bodies, url, kind == "plain")
                cpu[kind].append((time.process_time() - started) / n * 1e6)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"5. client CPU per item one by one, transport stubbed, {n} items, median of "
          f"{rounds} rounds: plain loop {med['plain']:.0f} us, framework ship "
          f"{med['ship']:.0f} us, plain loop with trust_env off {med['plain-noenv']:.0f} us")  # fmt: skip
    return med


def ship_rate(ws_path: Path, url: str, **options: Any) -> float:
    """items/s of one full Shipper run (fresh ship log) against ``url``."""
    for name in ("ship-log.jsonl", "ship-index.sqlite"):
        (ws_path / name).unlink(missing_ok=True)
    with Workspace.open(ws_path, readonly=True) as ws:
        n = ws.store.item_counts()["complete"]
    return n / ship_seconds(ws_path, url, **options)


def bench_batches(tmp: Path, n_single: int, n_batch: int, repeat: int) -> dict[str, float]:
    ws_single = tmp / "ws-single"
    if not ws_single.exists():
        build_workspace(ws_single, n_single)
    ws_batch = build_workspace(tmp / "ws-batch", n_batch)
    sizes = [1, 10, 50, 100, 250, 500]
    rates = dict.fromkeys(sizes, 0.0)
    for round_ in range(repeat):
        # Rotate the order each round: the shared machine's load drifts.
        shift = round_ % len(sizes)
        for size in sizes[shift:] + sizes[:shift]:
            with ingest_server(tmp) as url:
                ws = ws_single if size == 1 else ws_batch
                rates[size] = max(rates[size], ship_rate(ws, url, batch_size=size))
    single, batch = rates[1], rates[100]
    print(f"2. batches of 100, {n_batch} items: {batch:,.0f} items/s vs one-by-one "
          f"{single:,.0f} items/s = {batch / single:.1f}x (target >= 10x)")  # fmt: skip
    print("   batch size -> items/s (best of the rounds): " + ", ".join(
        f"{k}: {v:,.0f}" for k, v in sorted(rates.items())))  # fmt: skip
    return {f"batch{k}": v for k, v in rates.items()}


def bench_latency(tmp: Path, n: int, delay: float) -> dict[str, float]:
    ws = build_workspace(tmp / "ws-latency", n)
    out: dict[str, float] = {}
    for concurrency in (1, 8):
        with ingest_server(tmp) as url:
            upstream = url.removeprefix("http://")
            with helper(str(ROOT / "bench" / "ship_delay_proxy.py"), "--upstream", upstream,
                        "--delay", str(delay)) as port:  # fmt: skip
                out[f"c{concurrency}"] = ship_rate(
                    ws, f"http://127.0.0.1:{port}", batch_size=1, concurrency=concurrency
                )
    print(f"3. {delay * 1000:.0f} ms added latency, {n} items one by one: --concurrency 8 "
          f"{out['c8']:,.0f} items/s vs --concurrency 1 {out['c1']:,.0f} items/s = "
          f"{out['c8'] / out['c1']:.1f}x (target >= 5x)")  # fmt: skip
    return out


_PEAK = (
    "import resource, sys\n"
    "from framework.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _ship_peak(ws: Path, url: str, *extra: str) -> tuple[int, float, float, str]:
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _PEAK,
            "ship",
            "bench",
            "--workspace",
            str(ws),
            "--endpoint",
            url,
            *extra,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "FRAMEWORK_HOME": str(ws.parent)},
        check=False,
    )
    elapsed = time.perf_counter() - started
    peak = next(
        int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KB")
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    return proc.returncode, peak / 1024, elapsed, summary


def bench_memory(tmp: Path, n: int) -> dict[str, float]:
    t = time.perf_counter()
    ws = build_workspace(tmp / "ws-memory", n)
    built = time.perf_counter() - t
    baseline = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, framework_ship.run, framework.cli;"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    base_mb = int(baseline.stdout) / 1024
    with helper(str(ROOT / "bench" / "ship_noop_endpoint.py")) as port:
        url = f"http://127.0.0.1:{port}"
        code1, peak1, secs1, summary1 = _ship_peak(ws, url)
        code2, peak2, secs2, summary2 = _ship_peak(ws, url)
    log_mb = (ws / "ship-log.jsonl").stat().st_size / 1e6
    index_mb = (ws / "ship-index.sqlite").stat().st_size / 1e6
    print(f"4. {n:,} stored items (workspace built in {built:.0f} s), default batch size to the "
          f"no-op endpoint:\n   first run: exit {code1}, peak RSS {peak1:.0f} MB, {secs1:.0f} s "
          f"({n / secs1:,.0f} items/s)\n   re-run (all skipped): exit {code2}, peak RSS "
          f"{peak2:.0f} MB, {secs2:.0f} s\n   interpreter + imports alone: {base_mb:.0f} MB; "
          f"ship-log.jsonl {log_mb:.0f} MB, ship-index.sqlite {index_mb:.0f} MB "
          f"(target < 200 MB)\n   {summary1}\n   {summary2}")  # fmt: skip
    return {"peak_first_mb": peak1, "peak_rerun_mb": peak2, "baseline_mb": base_mb}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only", choices=["single", "batch", "latency", "memory", "overhead"], action="append"
    )
    parser.add_argument("--memory-items", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--single-items", type=int, default=None)
    parser.add_argument("--single-slices", type=int, default=None)
    args = parser.parse_args()
    quick = args.quick
    n_single = 600 if quick else 3000
    n_batch = 5000 if quick else 50_000
    n_latency = 200 if quick else 800
    n_memory = args.memory_items or (50_000 if quick else 1_000_000)
    repeat = args.repeat or (1 if quick else 2)
    only = set(args.only or ["single", "batch", "latency", "memory", "overhead"])
    print(f"$ {Path(sys.executable).name} bench/bench_ship.py {' '.join(sys.argv[1:])}")
    with tempfile.TemporaryDirectory(prefix="bench-ship-") as raw:
        tmp = Path(raw)
        if "single" in only:
            slices = args.single_slices or (10 if not quick else 2)
            bench_one_by_one(tmp, args.single_items or n_single, slices)
        if "batch" in only:
            bench_batches(tmp, n_single, n_batch, repeat)
        if "latency" in only:
            bench_latency(tmp, n_latency, 0.02)
        if "memory" in only:
            bench_memory(tmp, n_memory)
        if "overhead" in only:
            bench_overhead(tmp, 1000 if quick else 5000, 3)


if __name__ == "__main__":
    main()
