"""The spec commands through the real CLI: `framework validate`, `list`, `new`."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from framework.cli import main
from tests.fixtures import procs
from tests.paths import REPO, TESTS

BAD = TESTS / "specs" / "bad"
GOOD = """\
name: {name}
source_type: demo
start_urls: [http://127.0.0.1:8800/cases]
list: {{each: tr, follow: "a::attr(href)"}}
detail:
  id: {{css: "#id::text", required: true}}
  fields: {{title: "h1::text"}}
"""
RUN = "import sys; from framework.cli import main; sys.exit(main())"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project root the CLI finds through FRAMEWORK_HOME."""
    (tmp_path / "projects").mkdir()
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path))
    return tmp_path


def add_job(root: Path, name: str) -> Path:
    path = root / "projects" / name / "job.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(GOOD.format(name=name))
    return path


def corpus() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(BAD.glob("*.yaml")):
        first = path.read_bytes().split(b"\n", 1)[0].decode()
        _, _, rest = first.partition("# expect ")
        pos = rest.split(" ", 1)[0]
        out.append((path, f"{path}:{pos}: "))
    return out


@pytest.mark.process
def test_real_subprocess_refuses_the_whole_corpus_with_exit_2(root: Path) -> None:
    cases = corpus()
    env = {"FRAMEWORK_HOME": str(root), "PATH": "/usr/bin:/bin"}
    proc = procs.run(
        [sys.executable, "-c", RUN, "validate", *(str(p) for p, _ in cases)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    for path, prefix in cases:
        assert prefix in proc.stderr, f"{path.name}: {prefix!r} not in stderr"


def test_valid_spec_prints_ok_and_exits_0(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = add_job(root, "cases")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out == f"ok {path}\n"
    assert main(["validate", "cases"]) == 0
    assert main(["validate"]) == 0  # every job under projects/


def test_mixed_valid_and_invalid(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = add_job(root, "cases")
    bad = BAD / "invalid-css.yaml"
    assert main(["validate", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == f"ok {good}\n"
    assert err.startswith(f"{bad}:8:18: invalid CSS selector")
    assert "Traceback" not in err


def test_duplicate_job_names_across_projects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "dup"
    shutil.copytree(BAD / "dup-projects", root)
    monkeypatch.setenv("FRAMEWORK_HOME", str(root))
    assert main(["validate"]) == 2
    out, err = capsys.readouterr()
    second = root / "projects" / "beta" / "job.yaml"
    assert f"{second}:3:1: duplicate job name 'cases', already used by" in err
    assert out == f"ok {root / 'projects' / 'alpha' / 'job.yaml'}\n"


def test_unknown_job_is_exit_2(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_job(root, "cases")
    assert main(["validate", "nope"]) == 2
    assert "no job named 'nope'" in capsys.readouterr().err


def test_list_text_and_json(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_job(root, "cases")
    add_job(root, "other")
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [
        ["cases", "demo", "projects/cases/job.yaml"],
        ["other", "demo", "projects/other/job.yaml"],
    ]
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [
        {"name": "cases", "source_type": "demo", "file": "projects/cases/job.yaml", "error": None},
        {"name": "other", "source_type": "demo", "file": "projects/other/job.yaml", "error": None},
    ]


def test_list_says_why_a_spec_cannot_be_read(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_job(root, "cases")
    broken = root / "projects" / "broken" / "job.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("name: [oops\n")
    typeless = root / "projects" / "typeless" / "job.yaml"
    typeless.parent.mkdir(parents=True)
    typeless.write_text("name: typeless\nsource_type: [1]\n")
    assert main(["list"]) == 0  # an inventory, not a validation: said, not failed
    out, err = capsys.readouterr()
    assert [line.split() for line in out.splitlines()] == [
        ["broken", "?", "projects/broken/job.yaml"],
        ["cases", "demo", "projects/cases/job.yaml"],
        ["typeless", "?", "projects/typeless/job.yaml"],
    ]
    assert err.splitlines() == [
        f"broken: {broken}:2:1: YAML syntax error: expected ',' or ']', but got '<stream end>'"
        " (while parsing a flow sequence); expected valid YAML (`framework validate` checks it)",
        f"typeless: {typeless}: no source_type (a string) at the top level"
        " (`framework validate` checks it)",
    ]
    assert main(["list", "--json"]) == 0
    errors = {r["name"]: r["error"] for r in json.loads(capsys.readouterr().out)}
    assert errors["cases"] is None
    assert errors["broken"].startswith(f"{broken}:2:1: YAML syntax error")


@pytest.mark.parametrize("template", ["list-detail", "list-detail-subtabs", "json-api"])
def test_new_writes_a_valid_job_from_each_template(
    root: Path, template: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"job-{template}"
    assert (
        main(["new", name, "--template", template, "--start-url", "http://127.0.0.1:8800/x"]) == 0
    )
    target = root / "projects" / name / "job.yaml"
    text = target.read_text()
    assert f'name: "{name}"' in text
    assert "{{" not in text
    assert "http://127.0.0.1:8800/x" in text
    capsys.readouterr()
    assert main(["validate", name]) == 0
    assert capsys.readouterr().out == f"ok {target}\n"


def test_new_refuses_to_overwrite_and_bad_names(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "cases"]) == 0
    target = root / "projects" / "cases" / "job.yaml"
    before = target.read_text()
    target.write_text(before + "# my edits\n")
    assert main(["new", "cases"]) == 2
    assert "not overwriting" in capsys.readouterr().err
    assert target.read_text().endswith("# my edits\n")
    assert main(["new", "bad name"]) == 2
    assert main(["new", "x", "--template", "nope"]) == 2
    err = capsys.readouterr().err
    assert "expected letters, digits" in err
    assert "no template 'nope'" in err
    assert not (root / "projects" / "x").exists()


def test_new_says_which_of_its_own_values_is_wrong_and_writes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the spec's own check named the temporary file it validated, never written
    for args, said in [
        (["--start-url", "ftp://x"], "--start-url 'ftp://x': expected an absolute http(s) URL"),
        (["--start-url", "http://"], "--start-url 'http://': expected an absolute http(s) URL"),
        (["--start-url", "http://[oops/"], "--start-url 'http://[oops/': expected an absolute"),
        (["--source-type", "Bad Type"], "--source-type 'Bad Type': expected lowercase"),
    ]:
        assert main(["new", "x", *args]) == 2
        err = capsys.readouterr().err
        assert said in err
        assert ".job.yaml.new" not in err
        assert not (root / "projects" / "x").exists()


def test_a_template_that_does_not_validate_names_the_job_file_not_written(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "templates").mkdir()
    (root / "templates" / "bad.yaml").write_text(
        'name: "{{name}}"\nsource_type: "{{source_type}}"\nstart_urls: ["{{start_url}}"]\n'
        "list:\n  each: 5\n"
    )
    assert main(["new", "x", "--template", "bad"]) == 2
    err = capsys.readouterr().err
    assert f"{root / 'projects' / 'x' / 'job.yaml'} (not written):5:" in err
    assert ".job.yaml.new" not in err
    assert not (root / "projects" / "x").exists()


def test_new_keeps_a_start_url_with_quotes_as_it_is(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pasted into the YAML text raw, a quote ended the string (a YAML syntax error) and
    # could have added keys
    from framework.spec import load_spec

    url = 'http://127.0.0.1:8800/search?q="a\\b"&x=1'
    for template in ("list-detail", "json-api"):
        name = f"q-{template}"
        assert main(["new", name, "--template", template, "--start-url", url]) == 0
        spec = load_spec(root / "projects" / name / "job.yaml")
        assert list(spec.start_urls) == [url]
    capsys.readouterr()


def test_new_lists_templates(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new", "--list-templates"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"list-detail", "list-detail-subtabs", "json-api"} <= set(names)


@pytest.mark.parametrize("command", ["validate", "list", "new"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert "Usage: framework" in capsys.readouterr().out


@pytest.mark.process
@pytest.mark.parametrize("command", ["validate", "crawl"])
def test_spec_settings_outside_the_allow_list_stop_validate_and_crawl(
    root: Path, command: str
) -> None:
    """Through the real CLI: a spec that would open the telnet console and write a log
    and a feed anywhere is refused with every position, exit 2, before any request."""
    path = add_job(root, "cases")
    path.write_text(
        path.read_text()
        + "settings:\n  TELNETCONSOLE_ENABLED: true\n  LOG_FILE: /tmp/x.log\n"
        + "  FEEDS: {/tmp/x.json: {format: json}}\n  DOWNLOAD_DELAY: 1\n"
    )
    env = {"FRAMEWORK_HOME": str(root), "PATH": "/usr/bin:/bin"}
    args = [str(path)] if command == "validate" else [str(path), "--workspace", "ws"]
    proc = procs.run(
        [sys.executable, "-c", RUN, command, *args],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    for where, name in (("9:3", "TELNETCONSOLE_ENABLED"), ("10:3", "LOG_FILE"), ("11:3", "FEEDS")):
        line = next(x for x in lines if x.startswith(f"{path}:{where}: "))
        assert f"setting '{name}' is not allowed in a spec" in line
        assert f"pass `-s {name}=...` on the command line" in line
    assert not (root / "ws").exists()
