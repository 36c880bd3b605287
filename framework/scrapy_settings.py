"""Project settings for Scrapy's own command line (named by scrapy.cfg).

Only the spider loader lives here; every job's settings come from its spec (see
:mod:`framework.settings`), so ``scrapy crawl`` and ``framework crawl`` run the same
spider with the same settings.
"""

SPIDER_LOADER_CLASS = "framework.crawl.loader.JobSpiderLoader"
# The framework's jobs never need these; kept off even for `scrapy shell` & co.
REMOTE_CONTROL_ENABLED = False
TELNETCONSOLE_ENABLED = False
# `scrapy parse` runs the job's spider in parse-only mode (no workspace): see there.
COMMANDS_MODULE = "framework.scrapy_commands"
