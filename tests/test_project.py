"""Where things are: root discovery, job discovery and job resolution."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from framework.errors import JobNotFound, SpecError
from framework.project import find_root, job_files, resolve_job, workspace_path
from tests.paths import TESTS

DUP = TESTS / "specs" / "bad" / "dup-projects"


def write_job(root: Path, folder: str, name: str | None, source_type: str = "demo") -> Path:
    path = root / "projects" / folder / "job.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"name: {name}\n" if name is not None else ""
    path.write_text(
        head + f"source_type: {source_type}\nstart_urls: [http://127.0.0.1/]\n"
        "detail: {id: 'h1::text'}\n"
    )
    return path


def test_find_root_prefers_env_then_nearest_projects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FRAMEWORK_HOME", raising=False)
    (tmp_path / "projects").mkdir()
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(deep) == tmp_path.resolve()
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("FRAMEWORK_HOME", str(other))
    assert find_root(deep) == other.resolve()


def test_workspace_path(tmp_path: Path) -> None:
    assert workspace_path(tmp_path, "cases") == tmp_path / "var" / "cases"
    assert workspace_path(tmp_path, "cases", tmp_path / "w") == (tmp_path / "w").resolve()


def test_job_files_reads_declared_names(tmp_path: Path) -> None:
    a = write_job(tmp_path, "folder-a", "alpha")
    b = write_job(tmp_path, "beta", None)  # no name: listed under its folder
    c = tmp_path / "projects" / "broken" / "job.yaml"
    c.parent.mkdir()
    c.write_text("name: [unclosed\n")
    assert job_files(tmp_path) == {"alpha": a, "beta": b, "broken": c}


def test_duplicate_job_names_are_located_at_the_second_file(tmp_path: Path) -> None:
    shutil.copytree(DUP, tmp_path / "dup")
    root = tmp_path / "dup"
    with pytest.raises(SpecError) as info:
        job_files(root)
    (problem,) = info.value.problems
    second = root / "projects" / "beta" / "job.yaml"
    assert (problem.file, problem.line, problem.col) == (str(second), 3, 1)
    assert str(root / "projects" / "alpha" / "job.yaml") in problem.what
    collected: list = []
    assert list(job_files(root, problems=collected)) == ["cases"]
    assert len(collected) == 1


def test_resolve_job_by_name_path_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = write_job(tmp_path, "folder-a", "alpha")
    monkeypatch.chdir(tmp_path)
    assert resolve_job("alpha", tmp_path) == a
    assert resolve_job(str(a), tmp_path) == a
    assert resolve_job("projects/folder-a", tmp_path).resolve() == a.resolve()
    with pytest.raises(JobNotFound, match=r"no job named 'nope'.*known jobs: alpha"):
        resolve_job("nope", tmp_path)
    with pytest.raises(JobNotFound, match=r"no spec file at missing\.yaml"):
        resolve_job("missing.yaml", tmp_path)
