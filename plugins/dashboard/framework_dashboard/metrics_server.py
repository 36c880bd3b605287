"""``--metrics-port``: one job's ``/metrics`` served inside a running crawl or ship.

Owns the ``framework.metrics`` entry point (:class:`framework.plugins.ServeMetrics`):
prometheus-client's own threaded HTTP server, over a registry that holds only the
dashboard's collector (:mod:`~framework_dashboard.metrics`) restricted to the one job
and workspace of the run. The metric names are the dashboard's, so a scrape config
and its dashboards serve both. Nothing is read until Prometheus scrapes: the run pays
for the figures only when they are asked for (at most one sample per ``min_interval``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from framework_dashboard.jobs import Job
from framework_dashboard.metrics import WorkspaceCollector
from framework_dashboard.progress import Tracker
from framework_dashboard.reader import Reader

STOP_WAIT_S = 10.0  # a scrape in progress is let finish, within reason


class JobReader(Reader):
    """A :class:`Reader` of one job at one workspace: not the project's job list."""

    def __init__(self, job: Job, *, tracker: Tracker | None = None) -> None:
        folder = Path(job.target) if not job.is_database else Path.cwd()
        super().__init__(folder, tracker=tracker)
        self._job = job

    def jobs(self) -> dict[str, Job]:
        return {self._job.name: self._job}


@dataclass
class MetricsServer:
    """A running server (:class:`framework.plugins.MetricsHandle`)."""

    host: str
    port: int
    httpd: WSGIServer
    thread: threading.Thread

    def stop(self) -> None:
        self.httpd.shutdown()  # returns once serve_forever has left its loop
        self.httpd.server_close()
        self.thread.join(STOP_WAIT_S)


def serve_metrics(
    job_name: str, workspace_location: Path | str, host: str, port: int
) -> MetricsServer:
    """Serve ``/metrics`` of ``job_name`` (its workspace at ``workspace_location``) on
    ``host:port`` in daemon threads; OSError when the port cannot be bound."""
    target: Path | str = workspace_location
    if isinstance(target, Path):
        target = target.resolve()
    reader = JobReader(Job(job_name, target, None))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkspaceCollector(reader))
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(host, int(httpd.server_port), httpd, thread)


__all__ = ["JobReader", "MetricsServer", "serve_metrics"]
