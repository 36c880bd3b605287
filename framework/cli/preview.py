"""``framework preview JOB [URL]``: what one page gives under the spec, field by field.

The loop of writing a spec: point a selector, see what it gives, fix it. Nothing is
written to the workspace (see :mod:`framework.crawl.preview`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from framework.errors import UsageError
from framework.jsontext import escape_json
from framework.project import find_root, resolve_job
from framework.terminal import printable

VALUE_WIDTH = 60


@click.command("preview")
@click.argument("job")
@click.argument("url", required=False)
@click.option(
    "--kind",
    "-k",
    help="page kind to read the page as (default: the kind a follow pattern of the job "
    "leads URL to, else the start kind)",
)
@click.option(
    "--file",
    "page_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="read this saved page instead of fetching URL (URL still resolves its links)",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object, for scripts")
@click.option(
    "-s", "--set", "settings", multiple=True, metavar="NAME=VALUE", help="a Scrapy setting"
)
@click.option(
    "-c",
    "--carry",
    "carried",
    multiple=True,
    metavar="NAME=VALUE",
    help="a value the page that links here would carry in (a list row's field)",
)
@click.option("-v", "--verbose", is_flag=True, help="show Scrapy's log of the fetch")
def preview(
    job: str,
    url: str | None,
    kind: str | None,
    page_file: Path | None,
    as_json: bool,
    settings: tuple[str, ...],
    carried: tuple[str, ...],
    verbose: bool,
) -> int:
    """Fetch URL (default: the first start URL) as the crawl would, or read --file, and
    show per record and field the value and the selector that gave it (a fallback
    means the layout changed), what came out empty, failed its type or broke a rule,
    and the links, next pages and sub-tab requests the page would make.

    Writes nothing to the workspace. Exit 0; 1 when a required field is missing,
    the kind's `each` matched nothing, a value the linking page carries in is missing
    (give it with --carry) or the page cannot be read; 2 on a bad call."""
    from framework.cli.crawl import _setting
    from framework.crawl import preview as pv
    from framework.crawl.secrets import Secrets
    from framework.spec import load_spec

    root = find_root()
    spec_path = resolve_job(job, root)
    spec = load_spec(spec_path)
    secrets = Secrets.from_spec(spec, where=str(spec_path))  # a missing variable: exit 2
    chosen_by = ""  # without --kind, how the kind was chosen for this URL
    if kind is None and url is not None:
        kind, chosen_by = pv.choose_kind(spec, url)
    else:
        kind = pv.check_kind(spec, kind)
    if url is None:
        url = spec.start_urls[0]
    if page_file is not None:
        response = pv.from_file(page_file, _resolved(secrets, url))
        origin = str(page_file)
    else:
        overrides: dict[str, Any] = dict(_setting(settings))
        if verbose:
            overrides["LOG_LEVEL"] = "INFO"
        response = pv.fetch(spec, spec_path, root, kind, url, overrides=overrides)
        origin = "fetched"
    carry = dict(_carry(item) for item in carried)
    report = pv.explain(spec, kind, response, origin=origin, mask=secrets.mask_value, carry=carry)
    if as_json:
        text = json.dumps(report.as_dict(), ensure_ascii=False, indent=2, default=str)
        click.echo(escape_json(text))  # what a terminal obeys, as \u escapes
    else:
        if chosen_by:  # on stderr: the report itself stays what --kind would print
            click.echo(printable(chosen_by), err=True)
        # the page chose most of what is shown (keys, values, URLs, notes): see printable
        click.echo(printable(render(report)))
        quiet = report.tab_value is not None or report.error or not report.reads_records
        if not report.matched and not quiet:
            others = [k for k in pv.kinds_of(spec) if k != kind]
            click.echo(f"(--kind K reads it as another kind: {', '.join(others)})")
    return 1 if report.missing_required or report.error or report.each_empty else 0


def _carry(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.isidentifier():
        raise UsageError(f"--carry: expected NAME=VALUE (a field name), got {item!r}")
    return name, value


def _resolved(secrets: Any, url: str) -> str:
    # a saved page's links are joined to the URL the crawl would have fetched
    from framework.spec.template import ENV_REF

    return ENV_REF.sub(lambda m: secrets.values.get(m.group(1), m.group(0)), url)


def render(report: Any) -> str:
    """The preview as text: a header, one block per record, then the requests."""
    lines = [
        f"{report.job}: {report.url} as kind {report.kind!r} "
        f"({report.origin}, HTTP {report.status}, {report.size} bytes)"
    ]
    if report.error:
        lines.append(f"! {report.error}")
    if report.tab_value is not None:
        lines.append("sub-tab value:")
        lines.append(json.dumps(report.tab_value, ensure_ascii=False, indent=2, default=str))
    n = len(report.records)
    for rec in report.records:
        head = f"record {rec.index + 1} of {n}"
        if rec.dedupe_key:  # the site's id: one line, whatever it holds
            head += f": {printable(rec.dedupe_key, keep='')}"
        if rec.missing:
            head += f"  DROPPED: missing required {', '.join(rec.missing)}"
        elif rec.held:
            rules = "; ".join(f"{h['field']}: {h['rule']}" for h in rec.held)
            head += f"  held (rule {printable(rules, keep='')}: stored aside, never shipped)"
        elif rec.stored:
            head += "  (stored)"
        else:
            head += "  (no id: values carried to the pages it links to)"
        lines.append(head)
        width = max((len(t.name) for t in rec.fields), default=4)
        for t in rec.fields:
            lines.append(f"  {t.name:<{width}}  {_trace(t)}")
        for f, why in rec.errors:
            if "[" in f:  # a nested row's field; the top-level ones are shown above
                lines.append(f"  {printable(f, keep='')}: {printable(why, keep='')}")
        for tab in rec.subtabs:
            body = f"  body {tab['body']}" if tab["body"] else ""
            lines.append(f"  -> {tab['method']} {tab['url']}  ({tab['kind']}){body}")
    reads = report.tab_value is None and not report.error and report.reads_records
    if not report.records and reads:
        if not report.matched:
            found = f": each ({report.each}) matched nothing" if report.each else ""
            lines.append(f"no records on this page{found}")
            if report.script_data:
                from framework.extract.hints import ScriptData

                lines.extend(f"  hint: {h}" for h in ScriptData(**report.script_data).lines())
        else:  # a kind with no fields: its records only lead on
            lines.append(f"each ({report.each}) matched {report.matched}; the kind has no fields")
    for to in report.follow_empty:
        lines.append(f"! follow to {to}: no link to follow on this page")
    if report.follow:
        lines.append(f"links to follow ({len(report.follow)}):")
        lines.extend(f"  -> {link['url']}  ({link['kind']})" for link in report.follow)
    if report.next_empty:
        lines.append(
            f"! next ({report.next_empty}): no next page on this page (a list's last page "
            "has none; on its first, check the selector)"
        )
    if report.next_suspect:
        lines.append(
            f"! pagination_suspect: this page has a link that looks like a next page: "
            f"try next: {report.next_suspect!r}"
        )
    if report.total_declared:
        lines.append(
            f"declared total: {report.total}"
            if report.total is not None
            else "! total: the page declares no total the `total` sources can read"
        )
    if report.next:
        lines.append("next page:")
        lines.extend(f"  -> {link['url']}  ({link['kind']})" for link in report.next)
    if report.forms:
        lines.append(f"form requests ({len(report.forms)}):")
        for sub in report.forms[:FORMS_SHOWN]:
            # the spec's fields come last (as in Scrapy): the end of a long body shows them
            text = sub["body"] or ""
            tail = text if len(text) <= VALUE_WIDTH else "..." + text[3 - VALUE_WIDTH :]
            body = f"  body {tail}" if text else ""
            lines.append(f"  -> {sub['method']} {sub['url']}  ({sub['kind']}){body}")
        if len(report.forms) > FORMS_SHOWN:
            lines.append(f"  ... and {len(report.forms) - FORMS_SHOWN} more (--json lists all)")
    from framework.crawl.page import SELECTOR_REFUSALS

    for why, count in sorted(report.refused.items()):
        first = report.refused_first.get(why)
        line = f"refused links ({why}): {count}"
        if why in SELECTOR_REFUSALS:  # the spec's selector, not the site: say what it got
            what = SELECTOR_REFUSALS[why].format(target=first or "")
            line = f"! {line}: the selector selected {what}"
        if first:
            line += f"; first: {_short(first)}"
        lines.append(line)
    return "\n".join(lines)


def _trace(t: Any) -> str:
    req = " (required)" if t.required else ""
    if t.outcome == "found":
        where = t.source or ""
        if t.source_index:
            where = f"fallback #{t.source_index} {where}: layout changed?"
        return f"{_short(t.value)}  <- {where}"
    if t.outcome == "failed":
        return f"FAILED{req}: {t.error}  <- {t.source}"
    if t.outcome == "carried":
        return f"{_short(t.value)}  (carried: --carry)"
    if t.outcome == "default":
        return f"{_short(t.value)}  (default: nothing matched)"
    return f"EMPTY{req}: nothing matched"


FORMS_SHOWN = 10  # a select with hundreds of options is a long list: the first ones


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."
