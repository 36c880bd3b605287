"""`make demo` (``python -m framework.demo``): the tour of :mod:`framework.demo.tour`.

``DEMO_PORT=N`` serves the demo site on that port; by default it takes a free one.
"""

from __future__ import annotations

from framework.demo.tour import main

if __name__ == "__main__":
    raise SystemExit(main())
