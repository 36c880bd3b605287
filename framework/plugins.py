"""Hooks the core calls into plugins it never imports: found through entry points.

Owns the discovery of *renderers*, the plugins that fetch pages through something other
than Scrapy's HTTP client (``render: playwright``). A renderer is registered in its
package's ``pyproject.toml``::

    [project.entry-points."framework.renderers"]
    playwright = "framework_playwright.renderer:PlaywrightRenderer"

and the object (or class, instantiated without arguments) named there follows
:class:`Renderer`. Also owns the hooks of plugins with workspace state
(``framework.workspace_copy``) and the ``/metrics`` server of ``--metrics-port``
(``framework.metrics``). Commands of plugins are found by :mod:`framework.cli` (group
``framework.commands``); this module must not import any plugin by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from framework.errors import UsageError

if TYPE_CHECKING:
    from framework.spec.render import RenderOptions

__all__ = [
    "METRICS_GROUP",
    "METRICS_HOST",
    "RENDERERS_GROUP",
    "WORKSPACE_COPY_GROUP",
    "MetricsHandle",
    "Renderer",
    "RequestMeta",
    "ServeMetrics",
    "WorkspaceCopyHook",
    "load_renderer",
    "metrics_server",
    "renderer_unavailable",
    "serve_metrics",
    "workspace_copy_hooks",
]

RENDERERS_GROUP = "framework.renderers"

#: What to install when a renderer plugin is missing, by ``render:`` value.
_INSTALL = {
    "playwright": "pip install -e plugins/playwright (and the system Chromium: "
    "apt-get install chromium)",
}


class RequestMeta(Protocol):
    """Row kind -> the meta its request needs (``{}`` for a kind that is not rendered)."""

    def __call__(self, kind: str, /) -> dict[str, Any]: ...


class Renderer(Protocol):
    """What the core asks of a renderer plugin. ``settings`` are the job's own
    (the spec's ``settings:``), as plain values."""

    def unavailable(self, settings: Mapping[str, Any]) -> str | None:
        """``None`` when pages can be rendered here; else one sentence saying what is
        missing and what to install. Called by ``framework validate``; cheap, no I/O
        beyond looking for files."""
        ...

    def scrapy_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Scrapy settings of a job that renders (download handlers, reactor, page
        pool); the spec's own ``settings:`` still win over them."""
        ...

    def request_meta(self, kinds: Mapping[str, RenderOptions]) -> RequestMeta:
        """A function of a row kind to the meta its request needs (empty for a kind
        that is not in ``kinds``). Called once per request: it must be cheap, and each
        call must return new objects (the download handler mutates some)."""
        ...


@cache
def _load(name: str) -> Renderer | None:
    for ep in entry_points(group=RENDERERS_GROUP, name=name):
        obj = ep.load()
        found: Renderer = obj() if isinstance(obj, type) else obj
        return found
    return None


def renderer_unavailable(name: str, settings: Mapping[str, Any]) -> str | None:
    """Why ``render: <name>`` cannot run here (one sentence), or ``None``."""
    found = _load(name)
    if found is None:
        return (
            f"render: {name} needs the {name} plugin, which is not installed; install it: "
            f"{_INSTALL.get(name, f'the package that registers {name!r} as a renderer')}"
        )
    return found.unavailable(settings)


def load_renderer(name: str, settings: Mapping[str, Any]) -> Renderer:
    """The renderer for ``render: <name>``, or :class:`UsageError` saying what to install."""
    why = renderer_unavailable(name, settings)
    if why is not None:
        raise UsageError(why)
    found = _load(name)
    assert found is not None
    return found


#: Plugins that keep state of their own in a workspace move it in ``framework workspace
#: copy`` through this group (the core never imports them).
WORKSPACE_COPY_GROUP = "framework.workspace_copy"


class WorkspaceCopyHook(Protocol):
    """What ``framework workspace copy`` asks of a plugin with workspace state. Both
    workspaces are open and locked; ``refuse`` runs before anything is written."""

    def refuse(self, source: Any, destination: Any, /) -> str | None:
        """Why the plugin's state cannot be copied into ``destination`` (one sentence,
        e.g. it has state of its own already), or ``None``."""
        ...

    def copy(self, source: Any, destination: Any, /) -> str | None:
        """Copy the plugin's state, after the core's; a few words on what was copied
        for the summary line, or ``None`` when there was nothing."""
        ...


def workspace_copy_hooks() -> list[WorkspaceCopyHook]:
    """Every installed :class:`WorkspaceCopyHook`, by entry-point name."""
    found: list[WorkspaceCopyHook] = []
    for ep in sorted(entry_points(group=WORKSPACE_COPY_GROUP), key=lambda e: e.name):
        obj = ep.load()
        found.append(obj() if isinstance(obj, type) else obj)
    return found


#: ``--metrics-port``: a plugin serves one job's ``/metrics`` beside a running crawl or
#: ship (the dashboard plugin registers ``serve``). The core only starts and stops it.
METRICS_GROUP = "framework.metrics"
METRICS_INSTALL = "pip install -e plugins/dashboard"
METRICS_HOST = "127.0.0.1"  # loopback: the figures name hosts, errors and jobs


class MetricsHandle(Protocol):
    """A running ``/metrics`` server: where it listens, and how to stop it."""

    host: str
    port: int  # the port bound: the one asked for, or the system's choice for 0

    def stop(self) -> None:
        """Stop serving and close the socket; returns once no scrape is answered."""
        ...


class ServeMetrics(Protocol):
    def __call__(
        self, job_name: str, workspace_location: Path | str, host: str, port: int, /
    ) -> MetricsHandle:
        """Serve ``/metrics`` of the one job whose workspace is at ``workspace_location``
        (a folder or a database URL) on ``host:port``, in threads of this process;
        OSError when the port cannot be bound."""
        ...


def metrics_server() -> ServeMetrics:
    """The installed plugin's :class:`ServeMetrics`, or :class:`UsageError` saying what
    to install. Loaded only when asked: a run without ``--metrics-port`` never calls it."""
    for ep in sorted(entry_points(group=METRICS_GROUP), key=lambda e: e.name):
        found: ServeMetrics = ep.load()
        return found
    raise UsageError(
        "--metrics-port needs the dashboard plugin (it serves /metrics), which is not "
        f"installed; install it: {METRICS_INSTALL}"
    )


def serve_metrics(
    job_name: str, workspace_location: Path | str, host: str, port: int
) -> MetricsHandle:
    """Start serving one job's ``/metrics``; UsageError when no plugin serves it or the
    port cannot be bound (one line, exit 2)."""
    serve = metrics_server()
    try:
        return serve(job_name, workspace_location, host, port)
    except OSError as exc:
        raise UsageError(
            f"--metrics-port: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc
