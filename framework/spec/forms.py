"""Typed models of what a crawl submits besides following links: the forms of a page
(``forms:``, framework/crawl/forms.py) and the job's ``login:``
(framework/crawl/session.py). Their shape only; what they mean across keys (selectors,
templates, credentials) is :mod:`framework.spec.checks.forms`. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from framework.spec.values import StrictModel as _Strict

__all__ = [
    "FormField",
    "FormSpec",
    "LoginSpec",
    "LoginSuccess",
    "LoginToken",
    "SessionExpired",
]


class FormField(_Strict):
    """What one named field of a submitted form carries (``forms: [{fields: ...}]``).

    Exactly one of ``value`` (a template over the page's context: a constant,
    ``{author}``, ``{env:NAME}``), ``values`` (one request per value) or ``options``
    (one request per ``<option>`` of the form's ``<select>`` of that name). The short
    forms: a string is a ``value``, a list is ``values``."""

    value: str | None = None
    values: tuple[str, ...] | None = None
    options: bool = False
    exclude: tuple[str, ...] = ()  # option values never submitted (empty ones never are)
    carry: str | None = None  # the submitted value reaches the next page's records as this
    carry_label: str | None = None  # ... and the chosen option's text as this

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"value": data}
        if isinstance(data, list | tuple):
            return {"values": data}
        return data

    @model_validator(mode="after")
    def _one(self) -> FormField:
        given = [k for k in ("value", "values") if getattr(self, k) is not None]
        given += ["options"] if self.options else []
        if len(given) != 1:
            raise ValueError("a form field takes exactly one of value, values or options")
        if self.values is not None and not self.values:
            raise ValueError("`values` needs at least one value")
        if self.exclude and not self.options:
            raise ValueError("`exclude` goes with `options: true`")
        if self.carry_label is not None and not self.options:
            raise ValueError("`carry_label` goes with `options: true`")
        return self

    @property
    def fans_out(self) -> bool:
        return self.options or self.values is not None


class FormSpec(_Strict):
    """A form of the page submitted as ``FormRequest.from_response`` would: the page's
    own inputs (hidden ones such as ``__VIEWSTATE`` included) as they are, the named
    ``fields`` set on top; the response is a page of kind ``to``."""

    css: str | None = None  # the form, or an element inside it (Scrapy's formcss)
    xpath: str | None = None  # ... (formxpath)
    index: int | None = Field(default=None, ge=0)  # the n-th <form> of the page (formnumber)
    to: str
    fields: dict[str, FormField] = {}
    click: dict[str, str | int] | None = None  # attributes of the submit element (clickdata)
    dont_click: bool = False  # submit without any submit element's name=value
    method: Literal["GET", "POST"] | None = None  # None: the form's own method
    required: bool = True  # a page without the form is an error (else: no request)
    max_requests: int = Field(default=1000, ge=1)  # per page; over it the page is an error

    @model_validator(mode="after")
    def _where(self) -> FormSpec:
        given = [k for k in ("css", "xpath", "index") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError("a form is found by one of css, xpath or index")
        if self.click is not None and self.dont_click:
            raise ValueError("`click` and `dont_click: true` contradict each other")
        return self


class LoginSuccess(_Strict):
    """How a login proves it worked (every key given must hold); none given: the answer
    is below 400 and is not the login page again (its URL, its form)."""

    css: str | None = None  # must match on the page the login ends on
    cookie: str | None = None  # a cookie of this name must be in the jar afterwards
    status: int | None = Field(default=None, ge=100, le=599)  # the final answer's status


class SessionExpired(_Strict):
    """How a page says the session is gone (any one is enough): its row is fetched
    again after a new login, neither failed nor counted as an attempt."""

    status: tuple[int, ...] = (401, 403)
    # a regex searched in a redirect's target and in the final URL; default: the login
    # page's own URL (a redirect to the login form)
    url: str | None = None
    css: str | None = None  # matches on a page only a logged-out visitor sees

    @field_validator("status", mode="before")
    @classmethod
    def _status_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) else value


class LoginToken(_Strict):
    """A session that is a token in the login's JSON answer (not a cookie), sent as a
    header with every page request from then on."""

    json_path: str = Field(alias="json")  # where the token is in the answer: $.token
    header: str = "Authorization"
    value: str = "Bearer {token}"  # what the header says; {token} is the token


class LoginSpec(_Strict):
    """A login run before any other request of a crawl (and on every resume), and again
    whenever a page says the session expired (framework/crawl/session.py)."""

    url: str  # the login page (form) or endpoint (json); a path joins the first start URL
    form: str | None = None  # CSS selector of the form on the login page
    fields: dict[str, str] = {}  # form fields to fill: constants or {env:NAME}
    json_body: Any = Field(default=None, alias="json")  # POST this document instead
    success: LoginSuccess = LoginSuccess()
    expired: SessionExpired = SessionExpired()
    token: LoginToken | None = None  # the session is a token in the answer, not a cookie
    # new logins in a row with no page fetched between them before the run stops
    max_relogins: int = Field(default=3, ge=1, le=100)

    @model_validator(mode="after")
    def _one_way(self) -> LoginSpec:
        if (self.form is None) == (self.json_body is None):
            raise ValueError("a login takes exactly one of `form` (a selector) or `json`")
        if self.fields and self.form is None:
            raise ValueError("`fields` fill a login form: use them with `form`")
        return self
