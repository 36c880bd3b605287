"""Credentials as ``{env:NAME}`` references: resolved when a request is sent, never
written. Real crawls of the fixture site through the real CLI (the site records what it
received), then every byte the crawl left behind is searched for the secrets."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

import pytest

from framework.crawl.secrets import Secrets
from framework.demo.http import Answer, Request
from framework.demo.site import DemoSite
from framework.errors import UsageError
from framework.spec.models import JobSpec
from framework.workspace import NewRow, Outcome, PartWrite, Row, RowStatus, redact_url
from framework.workspace.jsonl import is_secret_key

# Characters a URL or a form must encode, so every encoded form is exercised too.
TOKEN = "tok/en+91=Zq"
BEARER = "bearer-s3cr3t-9x"
FORM_SECRET = "f0rm&secret value"


class RecordingSite(DemoSite):
    """The demo site, keeping every request it received (target, headers, body)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.received: list[Request] = []

    def _handle(self, req: Request) -> Answer:
        self.received.append(req)
        return super()._handle(req)


@pytest.fixture
def recording_site() -> Iterator[RecordingSite]:
    site = RecordingSite()
    site.start()
    try:
        yield site
    finally:
        site.stop()


def forms(secret: str) -> list[bytes]:
    """Every way a secret could be written: as is, URL-quoted, form-encoded, JSON."""
    texts = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    texts.add(json.dumps(secret)[1:-1])
    return sorted(t.encode("utf-8") for t in texts)


def assert_nowhere(secrets: list[str], ws: Path, *texts: str) -> None:
    files = [p for p in ws.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"state.sqlite", "urls.jsonl", "events.jsonl"} <= names, names
    for secret in secrets:
        for form in forms(secret):
            for path in files:  # state.sqlite, its -wal and -shm, the logs, the locks
                assert form not in path.read_bytes(), (form, path.name)
            for text in texts:
                assert form not in text.encode("utf-8"), form


def with_secrets(spec: Path, start_query: bool = True, form: bool = False) -> None:
    text = spec.read_text(encoding="utf-8")
    if start_query:
        text = text.replace("?offset=0", "?offset=0&token={env:FW_TEST_TOKEN}")
    if form:
        text = text.replace(
            'body: {form: {case: "{id}"}}',
            'body: {form: {case: "{id}", access: "{env:FW_TEST_FORM}"}}',
        )
        assert "FW_TEST_FORM" in text
    text += '\nheaders: {Authorization: "Bearer {env:FW_TEST_BEARER}", X-Client: demo}\n'
    spec.write_text(text, encoding="utf-8")


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("FW_TEST_BEARER", BEARER)
    monkeypatch.setenv("FW_TEST_FORM", FORM_SECRET)


@pytest.mark.process
def test_query_and_header_secrets_reach_the_site_and_no_file(
    recording_site: RecordingSite,
    good_spec: Callable[[str, str, Path], Path],
    tmp_path: Path,
    crawl_cli: Callable[..., Any],
    secret_env: None,
) -> None:
    spec = good_spec("api_offset", recording_site.url, tmp_path)
    with_secrets(spec)
    ws = tmp_path / "ws"
    # DEBUG: Scrapy's own "Crawled (200) <GET url>" lines name every URL
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "DEBUG")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Crawled (200)" in r.stderr

    api = [q for q in recording_site.received if q.target.startswith("/api/cases")]
    assert len(api) == 8  # seven pages of ten, then the empty one
    for q in api:  # the start URL and every page built from the response URL
        assert parse_qs(urlsplit(q.target).query)["token"] == [TOKEN], q.target
        assert q.headers["authorization"] == f"Bearer {BEARER}"
        assert q.headers["x-client"] == "demo"

    status = crawl_cli("status", "fixture-api-offset", "--workspace", str(ws), "--json")
    assert status.returncode == 0, status.stderr
    assert_nowhere([TOKEN, BEARER], ws, r.stdout, r.stderr, status.stdout, status.stderr)
    # the rows keep the reference, so a resumed crawl sends the secret again
    rows = (ws / "state.sqlite").read_bytes() + (ws / "state.sqlite-wal").read_bytes()
    assert b"token={env:FW_TEST_TOKEN}" in rows

    # a reparse that changes every item logs each page's change with its URL masked
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace('court: {json: "$.court"}', "court: {json: $.id}"))
    r = crawl_cli("reparse", str(spec), "--workspace", str(ws))
    assert r.returncode == 0, r.stderr[-3000:]
    logged = (ws / "events.jsonl").read_text(encoding="utf-8").splitlines()
    changed = [e for e in map(json.loads, logged) if e["event"] == "items_changed"]
    assert len(changed) == 7  # the seven pages of ten
    assert all("token=[redacted]" in e["url"] for e in changed), changed[0]
    assert_nowhere([TOKEN, BEARER], ws, r.stdout, r.stderr)


@pytest.mark.process
def test_form_body_secret_reaches_the_site_and_no_file(
    recording_site: RecordingSite,
    good_spec: Callable[[str, str, Path], Path],
    tmp_path: Path,
    crawl_cli: Callable[..., Any],
    secret_env: None,
) -> None:
    spec = good_spec("cases", recording_site.url, tmp_path)
    with_secrets(spec, start_query=False, form=True)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "INFO")
    assert r.returncode == 4, r.stderr[-3000:]  # the fixture's broken pages need a human
    posts = [q for q in recording_site.received if q.method == "POST"]
    assert len(posts) >= 70
    for q in posts:
        assert parse_qs(q.body.decode())["access"] == [FORM_SECRET]
        assert q.headers["authorization"] == f"Bearer {BEARER}"
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json")
    assert status.returncode == 0, status.stderr
    assert_nowhere([FORM_SECRET, BEARER], ws, r.stdout, r.stderr, status.stdout, status.stderr)


@pytest.mark.process
def test_a_missing_variable_stops_before_any_request(
    recording_site: RecordingSite,
    good_spec: Callable[[str, str, Path], Path],
    tmp_path: Path,
    crawl_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FW_TEST_BEARER", BEARER)
    monkeypatch.delenv("FW_TEST_TOKEN", raising=False)
    spec = good_spec("api_offset", recording_site.url, tmp_path)
    with_secrets(spec)
    ws = tmp_path / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws))
    assert r.returncode == 2, r.stderr[-3000:]
    assert "environment variable FW_TEST_TOKEN is not set" in r.stderr
    assert "Traceback" not in r.stderr
    assert BEARER not in r.stderr
    assert recording_site.received == []
    assert not ws.exists()


@pytest.mark.process
def test_validate_refuses_userinfo_through_the_cli(
    tmp_path: Path, crawl_cli: Callable[..., Any]
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\n"
        "start_urls: ['http://127.0.0.1/a', 'http://admin:hunter2@127.0.0.1/cases']\n"
        "detail: {id: 'h1::text'}\n"
    )
    r = crawl_cli("validate", str(spec))
    assert r.returncode == 2
    assert r.stderr.startswith(
        f"{spec}:3:36: start URL carries credentials (user:password@); expected no credentials"
    ), r.stderr


@pytest.mark.process
def test_a_spec_reads_only_fw_variables(
    tmp_path: Path,
    crawl_cli: Callable[..., Any],
    recording_site: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec copied from someone else named any variable of the crawl's environment
    and sent it to a host of its choosing: `?q={env:AWS_SECRET_ACCESS_KEY}` reached the
    site. Only `FW_*` variables are a spec's to read: validate refuses the others where
    they are written, the crawl refuses them before any request, and so does a spec's
    `ship.token_env` (it names the endpoint too)."""
    secret = "aws-s3cr3t-key-value"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("FRAMEWORK_SHIP_TOKEN", "ship-t0ken-value")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cases\nsource_type: demo\n"
        f"start_urls: ['{recording_site.url}/cases?q={{env:AWS_SECRET_ACCESS_KEY}}']\n"
        "headers: {X-Trace: '{env:FRAMEWORK_SHIP_TOKEN}'}\n"
        "ship: {endpoint: 'http://127.0.0.1:9/items', token_env: GITHUB_TOKEN}\n"
        "detail: {id: 'h1::text'}\n"
    )
    r = crawl_cli("validate", str(spec))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3, r.stderr
    assert lines[0].startswith(
        f"{spec}:3:14: {{env:AWS_SECRET_ACCESS_KEY}}: a spec reads only variables named FW_*"
    )
    assert lines[0].endswith("expected {env:FW_AWS_SECRET_ACCESS_KEY}, exported under that name")
    assert lines[1].startswith(f"{spec}:4:20: {{env:FRAMEWORK_SHIP_TOKEN}}: a spec reads only")
    assert lines[2].startswith(f"{spec}:5:57: ship token_env 'GITHUB_TOKEN': a spec names only")
    r = crawl_cli("crawl", str(spec), "--workspace", str(tmp_path / "ws"))
    assert r.returncode == 2, r.stderr[-3000:]
    assert recording_site.received == []  # nothing left the machine
    assert secret not in r.stderr + r.stdout
    # the last gate, for a spec that never went through validation
    from framework.spec.models import JobSpec

    model = JobSpec.model_validate(
        {
            "name": "j",
            "source_type": "s",
            "start_urls": ["http://h/?q={env:AWS_SECRET_ACCESS_KEY}"],
            "detail": {"id": "h1::text"},
        }
    )
    with pytest.raises(UsageError, match="a spec reads only variables named FW_"):
        Secrets.from_spec(model, environ={"AWS_SECRET_ACCESS_KEY": secret})


# ---------------------------------------------------------------- the masker itself


def _spec(**extra: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "j",
            "source_type": "s",
            "start_urls": ["http://h/list?token={env:FW_TOK}"],
            "detail": {
                "id": "h1::text",
                "subtabs": {
                    "t": {
                        "url": "/x/{id}?k={env:FW_KEY}",
                        "method": "POST",
                        "body": {"form": {"a": "{env:FW_FORMV}"}},
                        "fields": {"a": "p::text"},
                    }
                },
            },
            "headers": {"Authorization": "Bearer {env:FW_BEAR}"},
            **extra,
        }
    )


ENV = {
    "FW_TOK": "t/k+n=1",
    "FW_KEY": "key-123",
    "FW_FORMV": "a b&c",
    "FW_BEAR": "brr-1234",
    "HOME": "/root",
}


def _row(url: str, body: str | None = None, body_type: str | None = None) -> Row:
    return Row(
        1, "list", url, "GET", body, body_type, None, RowStatus.PENDING, 0, True, None, None,
        None, {}, "", "",
    )  # fmt: skip


def test_resolve_quotes_each_value_for_where_it_goes() -> None:
    s = Secrets.from_spec(_spec(), environ=ENV)
    url, body, headers = s.resolve(
        _row("http://h/x?t={env:FW_TOK}&h={env:HOME}", "a=%7Benv%3AFW_FORMV%7D", "form"),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert url == "http://h/x?t=t%2Fk%2Bn%3D1&h={env:HOME}"  # HOME is not the spec's: text
    assert body == b"a=a+b%26c"
    assert headers == {
        "Authorization": "Bearer brr-1234",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    _, body, _ = s.resolve(_row("http://h/", '{"a": "{env:FW_BEAR}"}', "json"), {})
    assert body == b'{"a": "brr-1234"}'


def test_mask_turns_every_form_back_into_the_reference() -> None:
    s = Secrets.from_spec(_spec(), environ=ENV)
    assert s.mask("http://h/x?t=t%2Fk%2Bn%3D1&u=t/k+n=1&v=t%2Fk%2Bn%3D1") == (
        "http://h/x?t={env:FW_TOK}&u={env:FW_TOK}&v={env:FW_TOK}"
    )
    assert s.mask_value({"a": ["Bearer brr-1234", {"b": "a+b%26c"}], "n": 5}) == {
        "a": ["Bearer {env:FW_BEAR}", {"b": "{env:FW_FORMV}"}],
        "n": 5,
    }


def test_mask_outcome_defuses_references_a_page_wrote() -> None:
    s = Secrets.from_spec(_spec(), environ=ENV)
    out = s.mask_outcome(
        Outcome(
            row_id=1,
            ok=True,
            error="boom at http://h/?token=t%2Fk%2Bn%3D1",
            new_rows=[
                # a link on a page that names a reference of the spec: never resolved
                NewRow(kind="detail", url="http://h/p?x={env:FW_BEAR}&t=t%2Fk%2Bn%3D1"),
                NewRow(
                    kind="detail.t",
                    # joined to a redirect target's path that named BEAR: not the tab's
                    url="http://h/{env:FW_BEAR}/x/1?k={env:FW_KEY}",
                    body="a=%7Benv%3AFW_FORMV%7D",
                    context={"tab": "t", "item_key": "s:1"},
                ),
            ],
            parts=[PartWrite("s:1", "t", {"echo": "key-123"})],
        )
    )
    assert out.error == "boom at http://h/?token={env:FW_TOK}"
    link, tab = out.new_rows
    assert link.url == "http://h/p?x=%7Benv:FW_BEAR}&t={env:FW_TOK}"
    assert s.resolve(_row(link.url), {})[0] == "http://h/p?x=%7Benv:FW_BEAR}&t=t%2Fk%2Bn%3D1"
    assert tab.url == "http://h/%7Benv:FW_BEAR}/x/1?k={env:FW_KEY}"
    assert out.parts[0].value == {"echo": "{env:FW_KEY}"}


def test_log_records_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    s = Secrets.from_spec(_spec(), environ=ENV)
    s.mask_logs()
    try:
        with caplog.at_level(logging.INFO):
            logging.getLogger("scrapy.core.scraper").error(
                "Error downloading %(request)s", {"request": "<GET http://h/?t=t%2Fk%2Bn%3D1>"}
            )
            try:
                raise ValueError("bad brr-1234")
            except ValueError:
                logging.getLogger("x").exception("failed")
        text = caplog.text
        assert "t%2Fk%2Bn%3D1" not in text
        assert "brr-1234" not in text
        assert "<GET http://h/?t={env:FW_TOK}>" in text
        assert "ValueError: bad {env:FW_BEAR}" in text
    finally:
        from framework.crawl import secrets as module

        module._LOG_MASKERS.remove(s)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({**ENV, "FW_TOK": ""}, "environment variable FW_TOK is empty or shorter than 4"),
        (
            {k: v for k, v in ENV.items() if k != "FW_BEAR"},
            "environment variable FW_BEAR is not set",
        ),
        ({**ENV, "FW_KEY": "x\r\nInjected: 1"}, "environment variable FW_KEY holds a line break"),
    ],
)
def test_unusable_variables_are_named_never_shown(environ: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        Secrets.from_spec(_spec(), where="job.yaml", environ=environ)
    assert str(info.value).startswith("job.yaml: ")
    for value in environ.values():
        if len(value) > 3:
            assert value not in str(info.value)


def test_another_site_gets_only_the_origin_as_referer() -> None:
    # Scrapy's default policy sends the whole page URL (and a ?token= in it) anywhere.
    from scrapy.settings import Settings
    from scrapy.spidermiddlewares.referer import RefererMiddleware

    from framework.settings import default_settings

    policy = RefererMiddleware(Settings(default_settings("j"))).default_policy()
    assert policy.referrer("http://a.org/x?token=s3cr3t", "http://b.org/y") == "http://a.org/"


# ------------------------------------------------------- the names masked in URL logs


@pytest.mark.parametrize(
    "name",
    ["pwd", "pass", "passwd", "access_key", "private_key", "jwt", "session", "sig",
     "signature", "auth", "api_key", "apikey", "client_secret", "key", "access_token",
     "X-Amz-Signature", "db_password", "aws_secret_access_key"],
)  # fmt: skip
def test_common_credential_parameters_are_masked_in_urls(name: str) -> None:
    url = f"https://h/p?page=2&{name}=s3cr3t&author=me"
    assert redact_url(url) == f"https://h/p?page=2&{name}=[redacted]&author=me"


@pytest.mark.parametrize("name", ["page", "author", "keyword", "passage", "dedupe_key", "q"])
def test_ordinary_parameters_stay(name: str) -> None:
    url = f"https://h/p?{name}=x"
    assert redact_url(url) == url


def test_credential_keys_are_masked_in_log_records() -> None:
    for key in ("pwd", "pass", "access_key", "private_key", "jwt", "client_secret", "x_pwd"):
        assert is_secret_key(key), key
    for key in ("dedupe_key", "item_key", "keys", "passage", "url"):
        assert not is_secret_key(key), key
