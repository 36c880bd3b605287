"""Project settings for Scrapy's own command line (named by scrapy.cfg).

Only the spider loader and what every crawl loads (the ``--metrics-port`` extension)
live here; every job's settings come from its spec (see
:mod:`framework.settings`), so ``scrapy crawl`` and ``framework crawl`` run the same
spider with the same settings.
"""

# lower case: Settings.setmodule takes every upper-case name of this module as a setting
from scrapy.settings import default_settings as _scrapy_defaults

SPIDER_LOADER_CLASS = "framework.crawl.loader.JobSpiderLoader"
# The framework's jobs never need these; kept off even for `scrapy shell` & co.
REMOTE_CONTROL_ENABLED = False
TELNETCONSOLE_ENABLED = False
# `scrapy parse` runs the job's spider in parse-only mode (no workspace): see there.
COMMANDS_MODULE = "framework.scrapy_commands"
# A crawl's -o/-O feeds write as `framework export` does (framework/exporters.py): CSV
# formulas as text, XML well-formed whatever the keys and text, JSON with what acts on
# a terminal escaped; a local file created private (0600, folders 0700), never written
# through a symlink.
FEED_EXPORTERS = {
    "csv": "framework.exporters.CsvExporter",
    "xml": "framework.exporters.XmlExporter",
    "json": "framework.exporters.JsonExporter",
    "jsonlines": "framework.exporters.JsonLinesExporter",
    "jsonl": "framework.exporters.JsonLinesExporter",
    "jl": "framework.exporters.JsonLinesExporter",
}
FEED_STORAGES = {
    "": "framework.exporters.FeedFileStorage",
    "file": "framework.exporters.FeedFileStorage",
}
# `--metrics-port`'s server (framework/crawl/metrics.py), beside Scrapy's own extensions:
# in the base dict, so a job's or the command line's EXTENSIONS cannot drop it by
# accident; it does nothing (NotConfigured) unless FRAMEWORK_METRICS_PORT is set.
EXTENSIONS_BASE = {
    **_scrapy_defaults.EXTENSIONS_BASE,
    "framework.crawl.metrics.MetricsServer": 0,
}
