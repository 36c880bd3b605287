"""The bundled court-case demo site: deterministic data, pre-rendered pages, a fast
local HTTP server with fault injection, and the ground truth a correct crawl must match.

Modules: :mod:`.data` (the cases, generated from a seed), :mod:`.pages` (every page
rendered once to bytes), :mod:`.truth` (expected records, broken pages, expected
requests), :mod:`.faults` (injected 429/503/500 answers and delays), :mod:`.http` (the
asyncio HTTP/1.1 server) and :mod:`.site` (the site object and its command line).

This package must not import it, so that ``python -m framework.demo.site`` runs clean.
"""
