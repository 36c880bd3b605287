"""The order each language writes numeric dates in, and which languages there are:
dateparser's locale data, read on first use (importing it costs a quarter of a second)."""

from __future__ import annotations

__all__ = ["DATE_ORDERS", "date_order_of", "known_language", "language_date_order"]

DATE_ORDERS = ("DMY", "MDY", "YMD")


def known_language(code: str) -> bool:
    """Whether dateparser has this language (``id``, ``pt``, ``en``): the spec checks
    ``languages:`` with it, so a typo fails before any request."""
    from dateparser.data.languages_info import language_order

    return code in language_order


_LANGUAGE_ORDERS: dict[str, str | None] = {}


def language_date_order(code: str) -> str | None:
    """The order a language writes numeric dates in (dateparser's locale data: ``en``
    MDY, ``id`` DMY, ``ja`` YMD), None when its data says none."""
    if code not in _LANGUAGE_ORDERS:
        import importlib

        try:
            data = importlib.import_module(f"dateparser.data.date_translation_data.{code}")
            order = data.info.get("date_order")
        except ImportError:
            order = None
        _LANGUAGE_ORDERS[code] = order if order in DATE_ORDERS else None
    return _LANGUAGE_ORDERS[code]


def date_order_of(own: str | None, languages: tuple[str, ...]) -> str | None:
    """A field's order of numeric dates: its own ``date_order``, else the one its
    languages agree on; None when neither says (day first) or the languages disagree
    (``framework validate`` asks for a ``date_order`` then)."""
    if own is not None or not languages:
        return own
    orders = {language_date_order(code) for code in languages} - {None}
    return orders.pop() if len(orders) == 1 else None
