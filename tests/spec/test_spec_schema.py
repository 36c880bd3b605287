"""The spec's JSON Schema (`framework schema`, the shipped job.schema.json, the templates'
yaml-language-server line) and validation that reports every problem in one run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from framework.spec.schema import SCHEMA_FILE, job_schema, schema_text
from tests.fixtures.crawl import run_cli
from tests.paths import REPO

GOOD = sorted((REPO / "tests" / "specs" / "good").glob("*.yaml"))
TEMPLATES = sorted((REPO / "templates").glob("*.yaml"))
LINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


def _validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _template_data(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    for name, value in (("name", "x"), ("source_type", "x"), ("start_url", "https://a.example/")):
        text = text.replace("{{" + name + "}}", value)
    return yaml.safe_load(text)


def test_the_shipped_schema_is_the_generated_one():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "framework/spec/job.schema.json is stale: regenerate it with "
        "`framework schema > framework/spec/job.schema.json`"
    )


@pytest.mark.process
def test_framework_schema_prints_it():
    r = run_cli("schema")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == job_schema()
    r = run_cli("schema", "--path")
    assert Path(r.stdout.strip()) == SCHEMA_FILE


@pytest.mark.parametrize("path", GOOD + TEMPLATES + [REPO / "projects/demo/job.yaml"], ids=str)
def test_every_valid_spec_fits_the_schema(path):
    data = _template_data(path) if path in TEMPLATES else yaml.safe_load(path.read_text())
    errors = [e.message for e in _validator().iter_errors(data)]
    assert errors == []


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("unknown-key.yaml", "frobnicate"),
        ("misspelled-top-key.yaml", "detial"),
        ("misspelled-key.yaml", "requird"),
        ("wrong-enum.yaml", "money"),
        ("missing-root-key.yaml", "source_type"),
    ],
)
def test_the_schema_refuses_what_the_models_refuse(name, where):
    data = yaml.safe_load((REPO / "tests" / "specs" / "bad" / name).read_text())
    errors = list(_validator().iter_errors(data))
    assert errors
    text = " ".join(str(e) for e in errors)
    assert where in text


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_point_editors_at_the_shipped_schema(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    m = LINE.match(first)
    assert m, first
    assert (path.parent / m.group(1)).resolve() == SCHEMA_FILE.resolve()


@pytest.mark.process
def test_framework_new_points_the_new_job_at_the_schema(tmp_path):
    (tmp_path / "projects").mkdir()
    r = run_cli("new", "mine", "--start-url", "https://a.example/", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job = tmp_path / "projects" / "mine" / "job.yaml"
    m = LINE.match(job.read_text(encoding="utf-8").splitlines()[0])
    assert m
    assert (job.parent / m.group(1)).resolve() == SCHEMA_FILE.resolve()
    r = run_cli("new", "--list-templates", cwd=tmp_path)
    assert "yaml-language-server" not in r.stdout  # each template's own first line


BOTH = """\
name: both
source_type: both
start_urls: ["https://a.example/cases?api_key=s3cr3tv4lue", "ftp://a.example/"]
allowed_domains: ["a.example/cases"]
settings: {ITEM_PIPELINES: {"os.system": 1}, DOWNLOAD_DELAY: -1}
colour: blue
list:
  each: "table..cases tr"
  follow: "a.detail::attr(href)"
detail:
  id: {css: "#id::text", required: true}
  fields:
    title: {css: "h1:::text", requird: true}
    amount: {css: ".amount::text", type: numbr}
    when: {xpath: "//p[bad(", type: date}
  subtabs:
    rulings:
      url: "/cases/{id}/tab/rulings"
      format: json
      each: "$.rows[*"
      fields:
        no: {json: "$.no"}
"""


@pytest.mark.process
def test_structural_and_expression_problems_come_out_in_one_run(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(BOTH, encoding="utf-8")
    r = run_cli("validate", str(spec))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    expected = [
        (3, "start URL 'ftp://a.example/' is not an absolute http(s) URL"),  # same run too
        (3, "literal credential"),
        (4, "allowed domain 'a.example/cases' is not a host name"),
        (5, "setting 'ITEM_PIPELINES' is not allowed in a spec"),
        (5, "wrong value for setting 'DOWNLOAD_DELAY': -1"),
        (6, "unknown key 'colour'"),  # the models'
        (8, "invalid CSS selector 'table..cases tr'"),  # the expressions', same run
        (13, "invalid CSS selector 'h1:::text'"),
        (13, "unknown key 'requird'"),
        (14, "wrong value for 'type': 'numbr'"),
        (15, "invalid XPath '//p[bad('"),
        (20, "invalid JSON path '$.rows[*'"),
    ]
    for line, what in expected:
        assert any(f"job.yaml:{line}:" in x and what in x for x in lines), (line, what, lines)
    assert len(lines) == len(expected), lines
    # in file order
    numbers = [int(x.split(":")[1]) for x in lines]
    assert numbers == sorted(numbers)


@pytest.mark.process
def test_a_value_of_the_wrong_shape_is_said_once(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        BOTH.replace('title: {css: "h1:::text", requird: true}', "title: {css: 5}"),
        encoding="utf-8",
    )
    r = run_cli("validate", str(spec))
    assert r.returncode == 2
    at_title = [x for x in r.stderr.splitlines() if "job.yaml:13:" in x]
    assert len(at_title) == 1, at_title
