"""Loopback, private and link-local addresses (framework/crawl/addresses.py), through the
real CLI and engine.

A job started on a public host must not be led onto the machine's own services (a
database port, the ingest endpoint's ``/v1/events``, a cloud's metadata address) by a
link, a redirect or a meta refresh, whether the URL names the address or a name that
resolves to it. The public start host is played by ``127.0.0.2`` declared public to the
crawl with ``FRAMEWORK_ALLOW_PRIVATE=127.0.0.2`` (a start host inside the operator's
networks lends its class to nothing); the "door" is a second server on ``127.0.0.1``,
reached as ``127.0.0.1`` (an IP literal) and as ``localhost`` (a name, refused once
resolved), and it counts every request it gets.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from framework.crawl.addresses import AddressPolicy, address_class, parse_networks
from framework.crawl.safety import url_refusal
from framework.errors import UsageError
from tests.crawl.test_crawl_hostile import _page, _rows, _write_spec
from tests.fixtures.crawl import events, workspace_items
from tests.fixtures.hostile import HostileServer
from tests.fixtures.server import LocalServer, stop_at_end

EXIT_USAGE = 2
EXIT_HALTED = 4
SECOND_LOOPBACK = "127.0.0.2"

ANY_HOST = """\
name: hostile
source_type: hostile
start_urls: ["{base}/"]
allowed_domains: []
pages:
  list:
    follow: {{css: "a::attr(href)", to: detail}}
  detail:
    id: {{url: '([^/]+)$'}}
    fields:
      text: {{re: '(?s)(.+)'}}
"""

DOOR_EVENTS = '{"events": ["run_started", "the door\'s own log"]}'


class _OnSecondLoopback(LocalServer):
    """A :class:`LocalServer` bound on 127.0.0.2: the same machine under an address
    other than the door's, so the crawl can be told it is public."""

    def __init__(self, handler: Any) -> None:
        self.httpd = ThreadingHTTPServer((SECOND_LOOPBACK, 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{SECOND_LOOPBACK}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


def _start_public() -> HostileServer:
    site = HostileServer()
    try:
        server = _OnSecondLoopback(site.handler()).start()
    except OSError as exc:  # a system without the whole 127/8 on its loopback device
        pytest.skip(f"cannot bind {SECOND_LOOPBACK}: {exc}")
    site._server = server
    site.url, site.port = server.url, server.port
    return site


@pytest.fixture
def public_site() -> Iterator[Callable[[], HostileServer]]:
    yield from stop_at_end(_start_public)


def _door(hostile_server: Callable[[], HostileServer]) -> HostileServer:
    door = hostile_server()
    # served as a page, so that a job allowed to reach it stores it as an item
    door.route("/v1/events", _page(DOOR_EVENTS))
    door.route("/robots.txt", "User-agent: *\n", headers={"Content-Type": "text/plain"})
    return door


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_public_job_is_never_led_onto_loopback_or_link_local_addresses(
    public_site: Callable[[], HostileServer],
    hostile_server: Callable[[], HostileServer],
    tmp_path: Path,
    crawl_cli: Any,
) -> None:
    site = public_site()
    door = _door(hostile_server)
    by_ip = f"http://127.0.0.1:{door.port}/v1/events"
    by_name = f"http://localhost:{door.port}/v1/events"
    site.route(
        "/",
        _page(
            f'<a href="{by_ip}">the door by address</a>'
            f'<a href="{by_name}">the door by name</a>'
            '<a href="/redirect-ip">302 to the door</a>'
            '<a href="/redirect-name">302 to the door by name</a>'
            '<a href="/chain">301 on-site, then 302 to the door</a>'
            '<a href="/refresh-name">meta refresh to the door by name</a>'
            '<a href="/metadata">302 to the metadata address</a>'
            '<a href="/fine">fine</a>'
        ),
    )
    site.route("/redirect-ip", status=302, headers={"Location": by_ip})
    site.route("/redirect-name", status=302, headers={"Location": by_name})
    site.route("/chain", status=301, headers={"Location": "/redirect-name"})
    site.route(
        "/refresh-name",
        _page("moving", head=f'<meta http-equiv="refresh" content="0; url={by_name}">'),
    )
    site.route(
        "/metadata", status=302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}
    )
    site.route("/fine", _page("<p>fine text</p>"))
    spec = _write_spec(tmp_path, ANY_HOST.format(base=site.url))
    ws = tmp_path / "ws"

    r = crawl_cli(
        "crawl",
        str(spec),
        "--workspace",
        str(ws),
        "-L",
        "INFO",
        "-s",
        f"FRAMEWORK_ALLOW_PRIVATE={SECOND_LOOPBACK}",
        timeout=180,
    )
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "Traceback" not in r.stderr

    assert door.total_hits() == 0  # not one request, not even its robots.txt
    rows = _rows(ws)
    assert by_ip not in rows  # an address in a link: never a row
    refused = {
        "redirect-ip": "address 127.0.0.1, a loopback address",
        "redirect-name": "host 'localhost' resolves to 127.0.0.1, a loopback address",
        "chain": "host 'localhost' resolves to 127.0.0.1",
        "refresh-name": "host 'localhost' resolves to 127.0.0.1",
        "metadata": "address 169.254.169.254, a link-local address",
    }
    for path, said in refused.items():
        row = rows[f"{site.url}/{path}"]
        assert (row["status"], row["error_kind"]) == ("error", "private_target"), (path, row)
        assert said in row["error"], (path, row["error"])
    assert "302 from" in rows[f"{site.url}/redirect-ip"]["error"]  # the hop is named
    # a name in a link becomes a row, refused once resolved, before any connection
    row = rows[by_name]
    assert (row["status"], row["error_kind"]) == ("error", "private_target"), row
    assert rows[f"{site.url}/fine"]["status"] == "ok"
    assert not any("the door's own log" in str(i.get("text")) for i in workspace_items(ws).values())
    counts = [e for e in events(ws) if e["event"] == "links_refused"][-1]["counts"]
    assert counts.get("private_target") == 1
    assert "refused links to the loopback address '127.0.0.1'" in r.stderr


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_job_started_on_loopback_follows_loopback_and_nothing_else_private(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()  # 127.0.0.1: the author's visible choice
    door = _door(hostile_server)
    site.route(
        "/",
        _page(
            f'<a href="http://localhost:{door.port}/v1/events">loopback by name</a>'
            '<a href="/metadata">302 to the metadata address</a>'
            '<a href="/lan">302 to a private address</a>'
        ),
    )
    site.route(
        "/metadata", status=302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}
    )
    site.route("/lan", status=302, headers={"Location": "http://10.255.255.1:5432/"})
    spec = _write_spec(tmp_path, ANY_HOST.format(base=site.url))
    ws = tmp_path / "ws"

    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    rows = _rows(ws)
    assert rows[f"http://localhost:{door.port}/v1/events"]["status"] == "ok"
    assert door.hits("/v1/events") == 1
    assert any("the door's own log" in str(i.get("text")) for i in workspace_items(ws).values())
    assert rows[f"{site.url}/metadata"]["error_kind"] == "private_target"
    lan = rows[f"{site.url}/lan"]
    assert lan["error_kind"] == "private_target"
    assert "address 10.255.255.1, a private address" in lan["error"]


@pytest.mark.process
@pytest.mark.timeout(120)
def test_validate_notes_start_urls_on_private_addresses(tmp_path: Path, crawl_cli: Any) -> None:
    spec = _write_spec(
        tmp_path,
        ANY_HOST.format(base="X").replace(
            'start_urls: ["X/"]',
            "start_urls:\n"
            '  - "http://127.0.0.1:5432/"\n'
            '  - "http://169.254.169.254/latest/meta-data/"\n'
            '  - "https://example.org/"\n',
        ),
    )
    r = crawl_cli("validate", str(spec), timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"ok {spec}" in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"note: {spec}:")]
    assert len(lines) == 2, r.stderr
    assert f"{spec}:4:5: start URL host '127.0.0.1' is a loopback address" in lines[0]
    assert "link-local" in lines[1]
    assert "example.org" not in r.stderr


@pytest.mark.process
@pytest.mark.timeout(120)
def test_private_networks_are_the_operators_to_allow_never_a_specs(
    tmp_path: Path, crawl_cli: Any
) -> None:
    spec = _write_spec(
        tmp_path,
        ANY_HOST.format(base="http://127.0.0.1:9")
        + "settings: {FRAMEWORK_ALLOW_PRIVATE: '10.0.0.0/8'}\n",
    )
    r = crawl_cli("validate", str(spec), timeout=60)
    assert r.returncode == EXIT_USAGE
    assert "FRAMEWORK_ALLOW_PRIVATE" in r.stderr
    plain = _write_spec(tmp_path, ANY_HOST.format(base="http://127.0.0.1:9"))
    ws = tmp_path / "ws"
    r = crawl_cli(
        "crawl", str(plain), "--workspace", str(ws), "-s", "FRAMEWORK_ALLOW_PRIVATE=10.0.0/x"
    )
    assert r.returncode == EXIT_USAGE, r.stderr[-2000:]
    assert "FRAMEWORK_ALLOW_PRIVATE: '10.0.0/x' is not a network" in r.stderr
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------- the policy itself


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("0.0.0.0", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("fd00::1", "private"),
        ("93.184.215.14", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_classes(address: str, kind: str | None) -> None:
    assert address_class(ipaddress.ip_address(address)) == kind


def _names(table: dict[str, list[str]]) -> Callable[[str], list[Any]]:
    return lambda host: [ipaddress.ip_address(a) for a in table.get(host, [])]


def test_the_start_hosts_lend_their_classes_and_the_operators_networks_lend_none() -> None:
    resolve = _names({"intranet.corp": ["10.0.0.5"], "example.org": ["93.184.215.14"]})
    public = AddressPolicy.for_job(["https://example.org/"], resolve=resolve)
    assert public.allowed == frozenset()
    assert public.refused(ipaddress.ip_address("127.0.0.1")) == "loopback"
    assert public.refused(ipaddress.ip_address("93.184.215.15")) is None
    intranet = AddressPolicy.for_job(["http://intranet.corp/"], resolve=resolve)
    assert intranet.refused(ipaddress.ip_address("10.9.9.9")) is None
    assert intranet.refused(ipaddress.ip_address("169.254.169.254")) == "link-local"
    vouched = AddressPolicy.for_job(
        ["http://10.0.0.5/"], parse_networks(["10.0.0.0/24"]), resolve=resolve
    )
    assert vouched.refused(ipaddress.ip_address("10.0.0.9")) is None
    assert vouched.refused(ipaddress.ip_address("10.0.1.9")) == "private"
    assert vouched.refused(ipaddress.ip_address("::ffff:10.0.0.9")) is None


def test_discovery_refuses_an_address_literal_the_job_may_not_reach() -> None:
    policy = AddressPolicy.for_job(["https://example.org/"], resolve=_names({}))
    assert url_refusal("http://127.0.0.1:5432/", frozenset(), policy) == "private_target"
    assert url_refusal("http://[::1]/x", frozenset(), policy) == "private_target"
    assert url_refusal("http://localhost/x", frozenset(), policy) is None  # at connect time
    # what was refused before still is, first
    assert url_refusal("http://127.0.0.1/", frozenset({"example.org"}), policy) == "offsite"
    assert url_refusal("file:///etc/passwd", frozenset(), policy) == "scheme"


def test_a_network_that_does_not_parse_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"'10\.0\.0/x' is not a network"):
        parse_networks(["10.0.0.0/8", "10.0.0/x"])
