"""``framework dashboard``: a read-only, live view of a project's workspaces.

Modules, one responsibility each:

* :mod:`~framework_dashboard.jobs`: which jobs there are and where their workspaces are.
* :mod:`~framework_dashboard.tail`: the lines a workspace log gained after a cursor.
* :mod:`~framework_dashboard.findings`: the last run's findings, every worker's summed.
* :mod:`~framework_dashboard.progress`: a job's counts over time (pages/s, ETA).
* :mod:`~framework_dashboard.reader`: one job's whole picture, from the core's read API.
* :mod:`~framework_dashboard.pages`: that picture as HTML (server-rendered, inline SVG).
* :mod:`~framework_dashboard.metrics`: the same figures in Prometheus's text format.
* :mod:`~framework_dashboard.app`: the Starlette app (pages, server-sent events, /metrics).
* :mod:`~framework_dashboard.serve` and :mod:`~framework_dashboard.cli`: uvicorn and the
  command.

It only reads workspaces (``Workspace.open(..., readonly=True)``) and never runs inside a
crawl: with the dashboard stopped, a crawl does exactly what it does without the plugin.
"""
