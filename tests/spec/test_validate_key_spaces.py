"""`framework validate` refuses two jobs that would write the same dedupe keys.

Two jobs with one source_type write the same keys (`{source_type}:{source_id}`), so at
the ingest endpoint each overwrites the other's items (a copied demo job shipped
`updated 69` over the demo's). Refused across projects/ unless every spec involved
says `key: {shared: true}`; the problem points at the second spec's `source_type:`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.cli import main
from tests.paths import REPO

SPEC = """\
# {name}
name: {name}
source_type: {source_type}
{key}start_urls: [http://127.0.0.1:8800/cases]
list: {{each: tr, follow: "a::attr(href)"}}
detail:
  id: {{css: "#id::text", required: true}}
  fields: {{title: "h1::text"}}
"""


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "projects").mkdir()
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path))
    return tmp_path


def add(root: Path, name: str, source_type: str, key: str = "") -> Path:
    path = root / "projects" / name / "job.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(SPEC.format(name=name, source_type=source_type, key=key))
    return path


def test_a_shared_source_type_is_refused_at_the_second_spec(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add(root, "alpha", "courts")
    beta = add(root, "beta", "courts")
    add(root, "gamma", "other")
    assert main(["validate"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"{beta}:3:1: source_type 'courts' is also the source_type of ")
    assert str(root / "projects" / "alpha" / "job.yaml") in err[0]
    assert "write the same dedupe keys" in err[0]
    assert err[0].endswith(
        "`key: {shared: true}` in every spec that shares the key space on purpose"
    )


def test_naming_one_job_checks_it_against_the_others(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alpha = add(root, "alpha", "courts")
    add(root, "beta", "courts")
    assert main(["validate", "alpha"]) == 2
    assert capsys.readouterr().err.startswith(f"{alpha}:3:1: source_type 'courts'")


def test_shared_on_purpose_in_every_spec_is_accepted(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add(root, "alpha", "courts", "key: {shared: true}\n")
    beta = add(root, "beta", "courts")
    assert main(["validate"]) == 2  # only one of them says so
    assert capsys.readouterr().err.startswith(f"{beta}:3:1:")
    beta.write_text(SPEC.format(name="beta", source_type="courts", key="key: {shared: true}\n"))
    assert main(["validate"]) == 0
    assert main(["validate", "beta"]) == 0


def test_distinct_source_types_and_one_job_are_fine(root: Path) -> None:
    add(root, "alpha", "courts")
    assert main(["validate"]) == 0
    add(root, "beta", "laws")
    assert main(["validate"]) == 0


def test_the_repository_projects_pass() -> None:
    """The repository's own jobs do not collide (run from any working directory)."""
    repo = REPO
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FRAMEWORK_HOME", str(repo))
        assert main(["validate"]) == 0
