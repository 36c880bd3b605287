"""``/metrics``: every job's figures in Prometheus's text format (prometheus-client).

Owns the metric names and labels (Prometheus conventions: snake case, a ``framework_``
prefix, ``_total`` on counters, base units; one series per job, kind, state ...). The
figures are read when Prometheus scrapes, from what the pages show
(:class:`~framework_dashboard.reader.Reader`): a custom collector, no global registry,
so two dashboards in one process (the tests) never share a series.

=======================================  =======  ===========================================
metric                                   type     what
=======================================  =======  ===========================================
framework_rows{job,kind,state}           gauge    queue rows by kind and state (pending/ok/error)
framework_rows_to_fetch{job}             gauge    what the next run fetches (pending + retryable)
framework_items{job,state}               gauge    stored items, complete or incomplete
framework_pages_total{job}               counter  requests sent (the URL log's lines)
framework_errors_total{job,kind,error}   counter  failed requests by row kind and error type
framework_pages_per_second{job}          gauge    requests per second, the last 10 s
framework_items_per_second{job}          gauge    items stored per second, the last 10 s
framework_eta_seconds{job}               gauge    rows still to fetch at the current pace
framework_crawl_running{job}             gauge    1 while a crawl (or a worker) runs
framework_deferred_hosts{job}            gauge    hosts under a Retry-After deadline
framework_deferral_seconds{job,host}     gauge    seconds left of a host's deadline
framework_deferrals_total{job,host}      counter  Retry-After deferrals: answers (429, or 503
                                                  with Retry-After) that set a host's deadline
framework_ship_keys{job,outcome}         gauge    dedupe keys by their latest delivery outcome
framework_ship_attempts_total{job,...}   counter  delivery attempts by outcome (ship log)
framework_ship_responses_total{job,...}  counter  the ingest door's answers by HTTP status
framework_job_up{job}                    gauge    1 when the workspace could be read
=======================================  =======  ===========================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from framework_dashboard.reader import Reader

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class WorkspaceCollector(Collector):
    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def collect(self) -> Iterator[Metric]:
        m = _Families()
        for job in self.reader.jobs().values():
            report = self.reader.report(job, top=1)
            if report.get("state") in ("no_workspace", "unreadable"):
                m.up.add_metric([job.name], 0.0)
                continue
            m.up.add_metric([job.name], 1.0)
            progress, live = self.reader.progress(job)
            _job(m, job.name, report, live, progress)
        yield from m.all()


class _Families:
    def __init__(self) -> None:
        g, c = GaugeMetricFamily, CounterMetricFamily
        self.up = g("framework_job_up", "1 when the job's workspace could be read", labels=["job"])
        self.rows = g(
            "framework_rows", "Queue rows by kind and state", labels=["job", "kind", "state"]
        )
        self.to_fetch = g(
            "framework_rows_to_fetch",
            "Rows the next run fetches (pending + retryable)",
            labels=["job"],
        )
        self.items = g("framework_items", "Stored items by completeness", labels=["job", "state"])
        self.pages = c("framework_pages", "Requests sent (lines of the URL log)", labels=["job"])
        self.errors = c(
            "framework_errors",
            "Failed requests by row kind and error type",
            labels=["job", "kind", "error"],
        )
        self.pps = g("framework_pages_per_second", "Requests per second (10 s)", labels=["job"])
        self.ips = g("framework_items_per_second", "Items stored per second (10 s)", labels=["job"])
        self.eta = g(
            "framework_eta_seconds", "Rows still to fetch at the current pace", labels=["job"]
        )
        self.running = g("framework_crawl_running", "1 while a crawl runs", labels=["job"])
        self.deferred = g(
            "framework_deferred_hosts", "Hosts under a Retry-After deadline", labels=["job"]
        )
        self.deferral = g(
            "framework_deferral_seconds",
            "Seconds left of a host's Retry-After deadline",
            labels=["job", "host"],
        )
        self.deferrals = c(
            "framework_deferrals",
            "Retry-After deferrals: answers (429, or 503 with Retry-After) that set a "
            "host's deadline",
            labels=["job", "host"],
        )
        self.ship_keys = g(
            "framework_ship_keys",
            "Dedupe keys by their latest delivery outcome",
            labels=["job", "outcome"],
        )
        self.ship_attempts = c(
            "framework_ship_attempts", "Delivery attempts by outcome", labels=["job", "outcome"]
        )
        self.ship_answers = c(
            "framework_ship_responses",
            "The ingest endpoint's answers by HTTP status (none: no answer)",
            labels=["job", "status"],
        )

    def all(self) -> list[Metric]:
        return [v for v in vars(self).values() if isinstance(v, Metric)]


def _job(
    m: _Families, job: str, report: dict[str, Any], live: dict[str, Any], progress: Any
) -> None:
    for kind, counts in sorted(live["rows"]["by_kind"].items()):
        for state in ("pending", "ok", "error"):
            m.rows.add_metric([job, kind, state], float(counts.get(state, 0)))
    m.to_fetch.add_metric([job], float(live["to_fetch"]))
    for state in ("complete", "incomplete"):
        m.items.add_metric([job, state], float(live["items"].get(state, 0)))
    m.pages.add_metric([job], float(progress.requests))
    for (kind, error), n in sorted(progress.errors_by_kind.items()):
        m.errors.add_metric([job, kind, error], float(n))
    m.pps.add_metric([job], float(live["pages_per_s"]))
    m.ips.add_metric([job], float(live["items_per_s"]))
    if live["eta_s"] is not None:
        m.eta.add_metric([job], float(live["eta_s"]))
    m.running.add_metric([job], 1.0 if live["crawl_running"] else 0.0)
    deferrals = report.get("deferrals") or []
    m.deferred.add_metric([job], float(len(deferrals)))
    for d in deferrals:
        m.deferral.add_metric([job, str(d.get("host"))], float(d.get("seconds_left") or 0))
    for host, n in sorted(progress.deferrals_by_host.items()):
        m.deferrals.add_metric([job, host], float(n))
    ship = (report.get("plugins") or {}).get("ship")
    if isinstance(ship, dict):
        for outcome, n in sorted((ship.get("latest_outcomes") or {}).items()):
            m.ship_keys.add_metric([job, str(outcome)], float(n))
    log = report.get("ship_log") or {}
    for outcome, n in (log.get("attempts") or {}).items():
        m.ship_attempts.add_metric([job, outcome], float(n))
    for status, n in (log.get("answers") or {}).items():
        m.ship_answers.add_metric([job, status], float(n))


def exposition(reader: Reader) -> bytes:
    """The text a scrape gets."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkspaceCollector(reader))
    return generate_latest(registry)


__all__ = ["CONTENT_TYPE", "WorkspaceCollector", "exposition"]
