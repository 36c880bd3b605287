"""The one error tree (framework.errors): page-level errors are in it, as they were
before in what they say and in what catches them."""

from __future__ import annotations

import pytest
from framework_playwright.actions import NavigationFailed, RenderTimeout

from framework.crawl.discovery import SitemapError
from framework.crawl.forms import FormError
from framework.crawl.page import PageError
from framework.crawl.safety import ResponseTooLarge
from framework.crawl.session import LoginFailed
from framework.errors import EXIT_FAILURE, FrameworkError, PageLevelError
from framework.extract.convert import ConversionError
from framework.extract.embedded import EmbeddedError
from framework.extract.patterns import LimitExceeded, NotStorable
from framework.workspace import ErrorKind

PAGE_LEVEL = [
    PageError,
    FormError,
    LoginFailed,
    ConversionError,
    LimitExceeded,
    NotStorable,
    EmbeddedError,
    SitemapError,
    ResponseTooLarge,
    RenderTimeout,
    NavigationFailed,
]


@pytest.mark.parametrize("kind", PAGE_LEVEL, ids=lambda k: k.__name__)
def test_a_page_level_error_is_in_the_tree_and_says_what_it_was_given(kind: type) -> None:
    assert issubclass(kind, PageLevelError)
    assert issubclass(kind, FrameworkError)
    if kind is NavigationFailed:  # the one that also carries how the page failed
        error = kind(ErrorKind.DNS, "no such form 'search'")
    else:
        error = kind("no such form 'search'")
    assert str(error) == "no such form 'search'"
    assert error.exit_code == EXIT_FAILURE


@pytest.mark.parametrize("kind", [ConversionError, NotStorable, EmbeddedError])
def test_the_value_errors_stay_value_errors(kind: type) -> None:
    # framework.spec.checks catch ConversionError with ValueError; callers may catch either
    with pytest.raises(ValueError, match="nope"):
        raise kind("nope")
