"""`render: playwright`: JS-rendered pages through scrapy-playwright and the system Chromium.

Modules: :mod:`.browser` (finding Chromium), :mod:`.renderer` (the object the core finds
through the ``framework.renderers`` entry point: availability, settings, request meta),
:mod:`.actions` (what happens in the page before it is read: ``wait_for``, clicks,
scrolling), :mod:`.guard` (the crawl's http(s) and allowed_domains rule on every
request the browser makes) and :mod:`.handler` (the download handler: scrapy-playwright's,
with a pool of pages reused between requests).
"""
