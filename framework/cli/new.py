"""``framework new``: start a job from a template in ``templates/``.

Templates are YAML specs with ``{{name}}``, ``{{source_type}}`` and ``{{start_url}}``
placeholders, the last two inside double quotes (escaped as such: a ``"`` in a URL stays
a character of the URL). The result is validated before it is written; an existing job
is never overwritten. A folder without a ``scrapy.cfg`` gets one, so that the ``scrapy crawl``
the command suggests works there too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import click

from framework.errors import SpecError, UsageError
from framework.project import JOB_NAME_RE, find_root

_PLACEHOLDER = re.compile(r"\{\{(name|source_type|start_url)\}\}")


def _quoted(value: str) -> str:
    """``value`` as the inside of a YAML double-quoted scalar (JSON's escapes are
    YAML's): a quote or backslash in it cannot end the string or add keys."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


def template_dirs(root: Path) -> list[Path]:
    """Where templates are looked for: the project's ``templates/``, then the ones
    that ship next to the package (an installed copy), first hit wins per name."""
    here = Path(__file__).resolve().parent.parent
    return [root / "templates", here / "templates", here.parent / "templates"]


def available_templates(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in template_dirs(root):
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                found.setdefault(path.stem, path)
    return found


def _first_line(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("# ").strip()
        if text and not text.startswith("yaml-language-server:"):
            return text
    return ""


@click.command("new")
@click.argument("name", required=False)
@click.option(
    "--template",
    "-t",
    "template",
    default="list-detail",
    show_default=True,
    help="Template name (see --list-templates).",
)
@click.option(
    "--start-url",
    default="https://example.org/",
    show_default=True,
    help="The job's first start URL.",
)
@click.option(
    "--source-type", default=None, help="Dedupe key prefix (default: the name, lowercased)."
)
@click.option("--list-templates", is_flag=True, help="List the templates and exit.")
def new(
    name: str | None, template: str, start_url: str, source_type: str | None, list_templates: bool
) -> None:
    """Write projects/NAME/job.yaml from a template (never overwrites).

    \b
    Templates (--list-templates lists them all, with what each is for):
      list-detail         list pages -> detail pages (the default)
      index-list-detail   an index -> paginated lists -> detail pages,
                          with the lists' declared `total:` checked
      list-detail-subtabs list -> detail -> AJAX sub-tabs

    The spec validates as written; replace each CHANGE-ME (or example)
    selector with your site's, then run `framework validate NAME`."""
    from framework.spec import load_spec
    from framework.spec.schema import with_schema_line

    root = find_root()
    templates = available_templates(root)
    if list_templates:
        for tname, path in templates.items():
            click.echo(f"{tname:<22} {_first_line(path)}")
        return
    if not name:
        raise UsageError("give the new job a NAME (or use --list-templates)")
    if not JOB_NAME_RE.match(name):
        raise UsageError(f"job name {name!r}: expected letters, digits, '_' or '-' (at most 64)")
    if template not in templates:
        known = ", ".join(templates) or "none found"
        raise UsageError(f"no template {template!r} (known: {known})")
    target = root / "projects" / name / "job.yaml"
    if target.exists():
        raise UsageError(f"{target} exists; not overwriting it")
    from framework.spec.models import SOURCE_TYPE_RE
    from framework.spec.validate import is_start_url

    st = source_type or re.sub(r"[^a-z0-9._-]", "-", name.lower())
    # the user's values, said as theirs: the spec's check would name a file never written
    if not SOURCE_TYPE_RE.match(st):  # one made of a valid job name is valid
        raise UsageError(
            f"--source-type {st!r}: expected lowercase letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)"
        )
    if not is_start_url(start_url):  # the spec's own check (a bad URL is no crash)
        raise UsageError(
            f"--start-url {start_url!r}: expected an absolute http(s) URL such as "
            "https://example.org/list"
        )
    values = {"name": name, "source_type": st, "start_url": _quoted(start_url)}
    text = _PLACEHOLDER.sub(
        lambda m: values[m.group(1)], templates[template].read_text(encoding="utf-8")
    )
    text = with_schema_line(text, target)  # the editor's schema, from where the job is
    created = not target.parent.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(".job.yaml.new")
    try:
        tmp.write_text(text, encoding="utf-8")
        try:
            load_spec(tmp)  # a template that does not validate is a bug: say so, write nothing
        except SpecError as exc:  # where it would have been, not the temporary file
            shown = f"{target} (not written)"
            raise SpecError(
                [
                    dataclasses.replace(p, file=shown) if p.file == str(tmp) else p
                    for p in exc.problems
                ]
            ) from None
        with target.open("x", encoding="utf-8") as out:  # "x": never overwrite, even racing
            out.write(text)
    except FileExistsError:
        raise UsageError(f"{target} exists; not overwriting it") from None
    finally:
        tmp.unlink(missing_ok=True)
        if created and not target.exists():
            target.parent.rmdir()
    cfg = _ensure_scrapy_cfg(root)
    click.echo(f"wrote {_shown(target)} (template {template})")
    if cfg is not None:
        where = "this folder" if _shown(root) == "." else str(root)
        click.echo(f"wrote {_shown(cfg)} (so that `scrapy crawl {name}` works in {where})")
    click.echo(f"check it with: framework validate {name}")
    click.echo(f"crawl it with: framework crawl {name}   (or: scrapy crawl {name})")


# What Scrapy's command line needs to find the jobs: its project settings module,
# whose spider loader reads projects/*/job.yaml under the folder holding scrapy.cfg.
SCRAPY_CFG = """\
# So that `scrapy list` and `scrapy crawl <job>` work from this folder:
# the settings module points Scrapy's spider loader at projects/*/job.yaml.
[settings]
default = framework.scrapy_settings
"""


def _ensure_scrapy_cfg(root: Path) -> Path | None:
    """Write ``<root>/scrapy.cfg`` when there is none (a project started in an empty
    folder); an existing one is the user's and is left alone. Returns what it wrote."""
    cfg = root / "scrapy.cfg"
    try:
        with cfg.open("x", encoding="utf-8") as out:
            out.write(SCRAPY_CFG)
    except FileExistsError:
        return None
    return cfg


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (what a user typed)."""
    try:
        return str(path.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)
