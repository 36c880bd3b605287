"""The value contract as data: one row per value string, the stored value or a visible
failure. The source of truth for tests/extract/test_value_contract.py (every row, each
converter) and tests/crawl/test_crawl_values.py (a slice, through a crawl, a preview
and a reparse). The rows marked ``issue`` are values that used to be stored silently
wrong; the docs' example table (docs/spec-reference.md, "Types") is run as well.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Fail(NamedTuple):
    """A visible failure: the conversion raises, its message containing ``says``."""

    says: str = ""


class Row(NamedTuple):
    type: str
    raw: Any
    expected: Any  # the stored value, or a Fail
    options: dict[str, Any] = {}  # the field's options (magnitude, pick, free, ...)


def price(amount: float, currency: str | None = None) -> dict[str, Any]:
    return {"amount": amount, "currency": currency}


ROWS: list[Row] = [
    # ------------------------------------------------------------ number: plain
    Row("number", "12", 12),
    Row("number", "-3", -3),
    Row("number", "12.50", 12.5),
    Row("number", "0", 0),
    Row("number", "007", 7),
    Row("number", "EUR 12.50 incl. VAT", 12.5),
    Row("number", "15%", 15),
    Row("number", "1,234.50", 1234.5),
    Row("number", "1.234,50", 1234.5),
    Row("number", "1.234.567", 1234567),
    Row("number", "1,234,567", 1234567),
    Row("number", "1,234", 1234),
    Row("number", "0,5", 0.5),
    Row("number", "0,500", 0.5),  # a number that starts with 0 groups no thousands
    Row("number", "12,5", 12.5),
    Row("number", "1.234", 1.234),
    Row("number", "1 234", 1234),
    Row("number", "1'234", 1234),
    Row("number", "1\u00a0234,50", 1234.5),
    Row("number", "1\u202f234\u202f567", 1234567),
    Row("number", "1 234,567", 1234.567),  # spaces group: the comma is the decimal mark
    Row("number", "12,34,567", 1234567),  # Indian grouping
    Row("number", "1,23,456.50", 123456.5),
    Row("number", "In stock (15 available)", 15),
    Row("number", "Total 5 (approx)", 5),
    Row("number", "4.5 out of 5 stars", 4.5),
    Row("number", "A-12", 12),
    Row("number", "ABC-12", 12),
    Row("number", "No.5", 5),
    Row("number", "5 km", 5),
    Row("number", "512MB", 512),
    Row("number", "2 Bedrooms", 2),
    Row("number", 7.5, 7.5),
    Row("number", 3, 3),
    # ------------------------------------------------------------ number: signs
    Row("number", "-5", -5),
    Row("number", "\u22125", -5),
    Row("number", "+5", 5),
    Row("number", "-$5.00", -5.0),
    Row("number", "-\u20ac5", -5),
    Row("number", "\u2212$5", -5),
    Row("number", "-EUR 5", -5),
    Row("number", "EUR -5", -5),
    Row("number", "$-5", -5),
    Row("number", "- 5", -5),
    Row("number", "-US$ 12", -12),
    Row("number", "(1,234)", -1234),
    Row("number", "($1,234.00)", -1234.0),
    Row("number", "$ (1,234.00)", -1234.0),
    Row("number", "(EUR 12)", -12),
    Row("number", "(15 available)", 15),
    # ------------------------------------------------------------ number: dots, exponents
    Row("number", ".5", 0.5),
    Row("number", "$.99", 0.99),
    Row("number", "-.25", -0.25),
    Row("number", "1e3", 1000.0),
    Row("number", "1.5e-3", 0.0015),
    Row("number", "2.5E+2", 250.0),
    Row("number", "1,5e3", Fail("exponent")),
    Row("number", "1e3K", Fail("magnitude")),  # an exponent, then a magnitude: never 1
    Row("number", "1e3a", Fail("exponent glued to a word")),  # neither 1 nor 1000
    Row("number", "1e34a", Fail("exponent glued to a word")),
    # ------------------------------------------------------------ number: refused
    Row("number", "1_234", Fail("'_'")),
    Row("number", "v1.2.3", Fail("version")),
    Row("number", "v1.2", Fail("version")),
    Row("number", "v 1.2", Fail("version")),
    Row("number", "ver1.2", Fail("version")),
    Row("number", "Version: 1.2", Fail("version")),
    Row("number", "rev 1.2.3", Fail("version")),
    Row("number", "version 2", 2),  # a version needs a dotted number
    Row("number", "Av 1.5", 1.5),  # 'v' ending a word is no version
    Row("number", "1.2.3", Fail("version-like")),
    Row("number", "0.000.1", Fail("version-like")),
    Row("number", "10.0.0.1", Fail("version-like")),
    Row("number", "1,2,3", Fail("version-like")),
    Row("number", "1.234.5,6", Fail("group nothing")),
    Row("number", "1234,567", Fail("groups nothing")),
    Row("number", "1.2K", Fail("magnitude")),
    Row("number", "3.4M", Fail("magnitude")),
    Row("number", "$63K", Fail("magnitude")),
    Row("number", "2bn", Fail("magnitude")),
    Row("number", "3 million", Fail("magnitude")),
    Row("number", "1.5 thousand", Fail("magnitude")),
    # beside a currency a lowercase m, mn, mm or b is a magnitude ("$1.5m": a million)
    Row("number", "\u00a31.5m", Fail("magnitude")),
    Row("number", "$5mn", Fail("magnitude")),
    Row("number", "$2b", Fail("magnitude")),
    Row("number", "1.5m EUR", Fail("magnitude")),
    # without one it is a unit: metres, millimetres, square metres
    Row("number", "1.5m", 1.5),
    Row("number", "5 m", 5),
    Row("number", "1.5 mm", 1.5),
    Row("number", "5m2", 5),
    Row("number", "2b", 2),
    Row("number", "10-20", Fail("range")),
    Row("number", "10 - 20", Fail("range")),
    Row("number", "$10 - $20", Fail("range")),
    Row("number", "10 to 20", Fail("range")),
    Row("number", "10\u201320 EUR", Fail("range")),
    Row("number", "2024-01-05", Fail("range")),
    Row("number", "Was $20, now $15", Fail("several amounts")),
    Row("number", "was 20 now 15", Fail("was/now")),
    Row("number", "Save 20% - was $50", Fail("was/now")),
    Row("number", "none", Fail("no number")),
    Row("number", "n/a", Fail("no number")),
    Row("number", True, Fail("not a number")),
    Row("number", "9" * 400 + ".5", Fail("finite")),
    Row("number", float("inf"), Fail("finite")),
    # ------------------------------------------------------------ number: options
    Row("number", "1.2K", 1200, {"magnitude": True}),
    Row("number", "3.4M", 3400000, {"magnitude": True}),
    Row("number", "$63K", 63000, {"magnitude": True}),
    Row("number", "2bn", 2000000000, {"magnitude": True}),
    Row("number", "3 million", 3000000, {"magnitude": True}),
    Row("number", "1.5 thousand", 1500, {"magnitude": True}),
    Row("number", "2,5 Mio.", 2500000, {"magnitude": True}),
    Row("number", "\u00a31.5m", 1500000, {"magnitude": True}),
    Row("number", "$2b", 2000000000, {"magnitude": True}),
    Row("number", "1.5m EUR", 1500000, {"magnitude": True}),
    Row("number", "1e3K", 1000000, {"magnitude": True}),
    Row("number", "5 m", 5, {"magnitude": True}),  # a unit still
    Row("number", "12", 12, {"magnitude": True}),
    Row("number", "10-20", 10, {"pick": "first"}),
    Row("number", "10-20", 20, {"pick": "last"}),
    Row("number", "$10 - $20", 20, {"pick": "max"}),
    Row("number", "10 to 20", 10, {"pick": "min"}),
    Row("number", "Was $20, now $15", 15, {"pick": "last"}),
    Row("number", "Was $20, now $15", 15, {"pick": "min"}),
    Row("number", "10 - 20", 20, {"pick": "last"}),  # the range's dash is no minus
    # ------------------------------------------------------------ integer
    Row("integer", "In stock (15 available)", 15),
    Row("integer", "(1,234)", -1234),
    Row("integer", "12.0", 12),
    Row("integer", "1,234,567 items", 1234567),
    Row("integer", "1e3", 1000),
    Row("integer", "12.5", Fail("whole number")),
    Row("integer", "1.5e-3", Fail("whole number")),
    Row("integer", "1_234", Fail("'_'")),
    Row("integer", "1.2K", Fail("magnitude")),
    Row("integer", "1.2K", 1200, {"magnitude": True}),
    Row("integer", "1e3K", 1000000, {"magnitude": True}),
    Row("integer", "2-3 days", Fail("range")),
    Row("integer", "2-3 days", 3, {"pick": "max"}),
    # ------------------------------------------------------------ price
    Row("price", "$1,234.50", price(1234.5, "$")),
    Row("price", "12,50 \u20ac", price(12.5, "\u20ac")),
    Row("price", "Rp 150.000", price(150000, "Rp")),
    Row("price", "Rp 1.500.000", price(1500000, "Rp")),
    Row("price", "EUR 9", price(9, "EUR")),
    Row("price", "12.99 USD", price(12.99, "USD")),
    Row("price", "\u20ac 1.234,56", price(1234.56, "\u20ac")),
    Row("price", "1 234,50 \u20ac", price(1234.5, "\u20ac")),
    Row("price", "\u00a31,234", price(1234, "\u00a3")),
    Row("price", "R$ 12,50", price(12.5, "R$")),
    Row("price", "CHF 12.-", price(12, "CHF")),
    Row("price", "1.999,- \u20ac", price(1999, "\u20ac")),
    Row("price", "\u20b91,23,456", price(123456, "\u20b9")),
    Row("price", "USD 1,299.00 (incl. 20% VAT)", price(1299, "USD")),
    Row("price", "2 for $10", price(10, "$")),  # the amount that stands with the currency
    Row("price", "$5.99 (2 pcs)", price(5.99, "$")),
    Row("price", "20% off: $50", price(50, "$")),
    Row("price", "$.99", price(0.99, "$")),
    Row("price", "-$5.00", price(-5, "$")),
    Row("price", "-\u20ac5", price(-5, "\u20ac")),
    Row("price", "\u2212$5", price(-5, "$")),
    Row("price", "-EUR 5", price(-5, "EUR")),
    # exponents are read as `number` reads them (price-parser alone reads "$1e3" as 1)
    Row("price", "$1e3", price(1000.0, "$")),
    Row("price", "USD 1e3", price(1000.0, "USD")),
    Row("price", "EUR1e3", price(1000.0, "EUR")),
    Row("price", "$ 1e-2", price(0.01, "$")),
    Row("price", "1.5E+3 \u20ac", price(1500.0, "\u20ac")),
    Row("price", "1.5e-3 USD", price(0.0015, "USD")),
    Row("price", "-$1e3", price(-1000.0, "$")),
    Row("price", "1,5e3 \u20ac", Fail("exponent")),
    Row("price", "$1e3a", Fail("exponent glued to a word")),
    Row("price", "$1e3K", Fail("magnitude")),
    Row("price", "$1e3K", price(1000000, "$"), {"magnitude": True}),
    Row("price", "1_234 EUR", Fail("'_'")),
    Row("price", "v1.2.3", Fail("version")),
    Row("price", "v 1.2", Fail("version")),
    Row("price", "ver1.2", Fail("version")),
    Row("price", "FREEDOM 12", Fail("part of a word")),
    # a price's m, mn, mm or b is a magnitude, with a currency or without
    Row("price", "\u00a31.5m", Fail("magnitude")),
    Row("price", "\u00a31.5m", price(1500000, "\u00a3"), {"magnitude": True}),
    Row("price", "$5mn", price(5000000, "$"), {"magnitude": True}),
    Row("price", "1.5m", Fail("magnitude")),
    Row("price", "\u20ac5 m\u00b2", price(5, "\u20ac")),  # per square metre: no magnitude
    Row("price", "$5/mo", price(5, "$")),
    Row("price", "(12.00)", price(-12, None)),
    Row("price", "12", price(12, None)),
    Row("price", 19.99, price(19.99, None)),
    Row("price", "free", Fail("free: 0")),
    Row("price", "FREE", Fail("free: 0")),
    Row("price", "Gratis", Fail("free: 0")),
    Row("price", "free", price(0, None), {"free": 0}),
    Row("price", "FREE", price(0, None), {"free": 0}),
    Row("price", "Free shipping on orders over $50", Fail("'free' and an amount")),
    Row("price", "Free shipping on orders over $50", Fail("'free' and an amount"), {"free": 0}),
    Row("price", "12.5%", Fail("percentage")),
    Row("price", "Was $20, now $15", Fail("several amounts")),
    Row("price", "Was $20, now $15", price(15, "$"), {"pick": "last"}),
    Row("price", "$10 - $20", Fail("range")),
    Row("price", "$10 - $20", price(10, "$"), {"pick": "first"}),
    Row("price", "10-20 EUR", Fail("range")),
    Row("price", "12 34", Fail("none with a currency")),
    Row("price", "$63K", Fail("magnitude")),
    Row("price", "$63K", price(63000, "$"), {"magnitude": True}),
    Row("price", "\u20ac1.2M", price(1200000, "\u20ac"), {"magnitude": True}),
    Row("price", "$0.000.1", Fail("version-like")),
    Row("price", "call us", Fail("no price")),
    Row("price", True, Fail("not a price")),
    Row("price", "9" * 400 + ".5 EUR", Fail("finite")),
    Row("price", float("inf"), Fail("finite")),
    # ------------------------------------------------------------ date
    Row("date", "2024-01-12", "2024-01-12"),
    Row("date", "2024-01-12T10:30:00", "2024-01-12"),
    Row("date", "12.01.2024", "2024-01-12"),
    Row("date", "12/01/2024", "2024-01-12"),
    Row("date", "1/2/2024", "2024-02-01"),
    Row("date", "2024/01/12", "2024-01-12"),
    Row("date", "2024.1.5", "2024-01-05"),
    Row("date", "January 12, 2024", "2024-01-12"),
    Row("date", "Jan 12, 2024", "2024-01-12"),
    Row("date", "12 January 2024", "2024-01-12"),
    Row("date", "3rd March 2024", "2024-03-03"),
    Row("date", "2024-13-01", Fail("month must be in 1..12")),
    Row("date", "31.02.2024", Fail("day is out of range")),
    Row("date", "13/13/2024", Fail("month must be in 1..12")),
    Row("date", "1.2.24", Fail("not a date")),  # a two-digit year needs a declared order
    Row("date", "Januari 2024", Fail("not a date")),
    Row("date", "12 Januari 2024", Fail("not a date")),
    # a declared order: one reading for every numeric date, never a swap
    Row("date", "2024-13-01", Fail("month must be in 1..12"), {"languages": ["en"]}),
    Row("date", "2024-13-01", Fail("month must be in 1..12"), {"languages": ["id"]}),
    Row("date", "1.2.24", "2024-01-02", {"languages": ["en"]}),
    Row("date", "03/04/24", "2024-03-04", {"languages": ["en"]}),
    Row("date", "03/04/2024", "2024-03-04", {"languages": ["en"]}),
    Row("date", "13/04/2024", Fail("month must be in 1..12"), {"languages": ["en"]}),
    Row("date", "1.2.24", "2024-02-01", {"languages": ["id"]}),
    Row("date", "03/04/2024", "2024-04-03", {"languages": ["id"]}),
    Row("date", "03/04/2024", "2024-04-03", {"languages": ["en"], "date_order": "DMY"}),
    Row("date", "03/04/24", "2024-04-03", {"languages": ["id", "en"], "date_order": "DMY"}),
    Row("date", "03/04/2024", "2024-03-04", {"date_order": "MDY"}),
    Row("date", "24.04.03", "2024-04-03", {"date_order": "YMD"}),
    Row("date", "03/04/2024", Fail("YMD"), {"date_order": "YMD"}),
    Row("date", "12 Januari 2024", "2024-01-12", {"languages": ["id"]}),
    Row("date", "Senin, 12 Februari 2024", "2024-02-12", {"languages": ["id"]}),
    Row("date", "Senin, 03/04/2024", "2024-04-03", {"languages": ["id"]}),
    Row("date", "5. M\u00e4rz 2024", "2024-03-05", {"languages": ["de"]}),
    Row("date", "kemarin", Fail("not a date"), {"languages": ["id"]}),
    # `format:` is strict: the format or nothing
    Row("date", "04/13/2024", "2024-04-13", {"format": "%m/%d/%Y"}),
    Row("date", "13/04/2024", Fail("%m/%d/%Y"), {"format": "%m/%d/%Y"}),
    Row("date", "2024-04-13", Fail("%m/%d/%Y"), {"format": "%m/%d/%Y"}),
    Row("date", "2024-13-04", "2024-04-13", {"format": "%Y-%d-%m"}),
    # ------------------------------------------------------------ datetime
    Row("datetime", "2024-01-12T10:30:00Z", "2024-01-12T10:30:00+00:00"),
    Row("datetime", "2024-01-12 10:30", "2024-01-12T10:30:00"),
    Row("datetime", "12.01.2024 10:30:15", "2024-01-12T10:30:15"),
    Row("datetime", "12.01.2024", "2024-01-12T00:00:00"),
    Row("datetime", "January 12, 2024 10:30", "2024-01-12T10:30:00"),
    Row("datetime", 0, "1970-01-01T00:00:00+00:00"),
    Row("datetime", "03/04/2024 10:30", "2024-03-04T10:30:00", {"languages": ["en"]}),
    Row("datetime", "2024-13-01 10:30", Fail("month must be in 1..12")),
    Row("datetime", "12.01.2024 10:30", Fail("%d.%m.%Y %H:%M:%S"), {"format": "%d.%m.%Y %H:%M:%S"}),
    Row("datetime", "soon", Fail("not a date-time")),
    # ------------------------------------------------------------ url
    Row("url", "  /a/b  ", "http://x.test/a/b"),
    Row("url", "https://ok.test/a?b=1#c", "https://ok.test/a?b=1#c"),
    Row("url", "b.html", "http://x.test/t/b.html"),
    Row("url", "?page=2", "http://x.test/t/page?page=2"),
    Row("url", "//cdn.test/i.png", "http://cdn.test/i.png"),
    Row("url", "mailto:a@b.test", "mailto:a@b.test"),
    Row("url", "tel:+62215551234", "tel:+62215551234"),
    Row("url", "HTTPS://OK.TEST/A", "HTTPS://OK.TEST/A"),
    Row("url", "http://x.test/caf\u00e9", "http://x.test/caf\u00e9"),
    Row("url", "javascript:alert(1)", Fail("scheme 'javascript'")),
    Row("url", "JavaScript:void(0)", Fail("scheme 'javascript'")),
    Row("url", "data:text/html,hi", Fail("scheme 'data'")),
    Row("url", "ftp://x.test/f", Fail("scheme 'ftp'")),
    Row("url", "not a url", Fail("spaces")),
    Row("url", "http://exa mple.com/a b", Fail("spaces")),
    Row("url", "http:///a", Fail("no host")),
    Row("url", "http://x.test:99x/", Fail("Port")),
    Row("url", "www.x.test/a", Fail("without a scheme")),
    Row("url", "mailto:", Fail("nothing after")),
    Row("url", 12, Fail("not a URL")),
    # ------------------------------------------------------------ boolean
    Row("boolean", "Yes", True),
    Row("boolean", "off", False),
    Row("boolean", "Y", True),
    Row("boolean", "0", False),
    Row("boolean", 1, True),
    Row("boolean", "TRUE", True),
    Row("boolean", "No", False),
    Row("boolean", "maybe", Fail("yes/no")),
    Row("boolean", "2", Fail("yes/no")),
    Row("boolean", "yes please", Fail("yes/no")),
    # ------------------------------------------------------------ string
    Row("string", "abc", "abc"),
    Row("string", "1,234.50", "1,234.50"),  # text stays text, never read as a number
    Row("string", "Caf\u00e9 & Co. <b>", "Caf\u00e9 & Co. <b>"),
    Row("string", 12, "12"),
    Row("string", 3.0, "3"),
    Row("string", True, "true"),
    Row("string", {"a": 1}, {"a": 1}),
    # ------------------------------------------------------------ duration (seconds)
    Row("duration", "PT2H30M", 9000),
    Row("duration", "P1DT2H", 93600),
    Row("duration", "PT1.5H", 5400),
    Row("duration", "PT0,5S", 0.5),
    Row("duration", "P1W", 604800),
    Row("duration", "PT0S", 0),
    Row("duration", "pt45m", 2700),
    Row("duration", "2h 30m", 9000),
    Row("duration", "2h30m", 9000),
    Row("duration", "1h", 3600),
    Row("duration", "90 min", 5400),
    Row("duration", "45 s", 45),
    Row("duration", "1.5 hours", 5400),
    Row("duration", "1.1h", 3960),  # decimal arithmetic: never 3960.0000000000005
    Row("duration", "2 hours, 30 minutes", 9000),
    Row("duration", "1 hour and 15 minutes", 4500),
    Row("duration", "1d 2h", 93600),
    Row("duration", "2.5 s", 2.5),
    Row("duration", "1:30:00", 5400),
    Row("duration", "0:00:30.5", 30.5),
    Row("duration", "12:05:09", 43509),
    Row("duration", 5400, 5400),  # a JSON number is seconds
    Row("duration", 90.0, 90),
    Row("duration", 1.5, 1.5),
    Row("duration", "-PT1H", Fail("negative")),
    Row("duration", "-2h", Fail("negative")),
    Row("duration", "P1Y", Fail("years or months")),
    Row("duration", "P2M", Fail("years or months")),
    Row("duration", "P", Fail("not a duration")),
    Row("duration", "PT", Fail("not a duration")),
    Row("duration", "P1DT", Fail("not a duration")),
    Row("duration", "P1.5DT2H", Fail("fraction")),
    Row("duration", "1:30", Fail("h:mm or m:ss")),
    Row("duration", "1:75:00", Fail("not a duration")),
    Row("duration", "90", Fail("not a duration")),  # 90 what?
    Row("duration", "about 2h", Fail("not a duration")),
    Row("duration", "2 hours 30", Fail("not a duration")),
    Row("duration", "30m 2h", Fail("not a duration")),  # units from the largest down
    Row("duration", "1h 1h", Fail("not a duration")),
    Row("duration", "1,5 h", Fail("not a duration")),
    Row("duration", "PT2H30M extra", Fail("not a duration")),
    Row("duration", "soon", Fail("not a duration")),
    Row("duration", -5, Fail("not a duration")),
    Row("duration", True, Fail("not a duration")),
]

# The rows a crawl, a preview and a reparse must agree on (tests/crawl/test_crawl_values.py):
# every text value a page carries as text, of every type, right ones and failures,
# options included (not JSON values, nor text with whitespace around it, which a page's
# text node does not keep as it is; not relative URLs, which resolve against the page).
CRAWL_SLICE: list[Row] = [
    r
    for r in ROWS
    if isinstance(r.raw, str)
    and r.raw.strip() == r.raw
    and r.raw
    and not r.raw.startswith("9" * 10)
    # a relative URL resolves against the page, whose address the crawl test picks
    and not (r.type == "url" and isinstance(r.expected, str) and "x.test" in r.expected)
]
