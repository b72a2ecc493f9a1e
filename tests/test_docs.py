"""The README and docs/ show what the project really holds: every code snippet marked
``<!-- from PATH -->`` is in PATH as written (a file a test runs: an example job, a DAG, an Azkaban
job), every snippet of the README in a language is marked so, and every link to a file of the
repository leads to one."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!-- from (?P<source>\S+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```\n", re.DOTALL)
LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def snippets(page: Path) -> list[tuple[str | None, str, str]]:
    return [(m["source"], m["lang"], m["body"]) for m in FENCE.finditer(page.read_text())]


def found_in(body: str, source: Path) -> bool:
    """Whether ``body`` is a run of ``source``'s lines, as written but for a common indent."""
    want = textwrap.dedent(body).splitlines()
    have = source.read_text().splitlines()
    return any(textwrap.dedent("\n".join(have[i:i + len(want)])).splitlines() == want
               for i in range(len(have) - len(want) + 1))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_each_marked_snippet_is_in_its_file_as_written(page):
    marked = [(source, body) for source, _, body in snippets(page) if source]
    for source, body in marked:
        path = REPO / source
        assert path.is_file(), f"{page.name}: a snippet names {source}, which does not exist"
        assert found_in(body, path), f"{page.name}: the snippet said to be from {source} is not in it:\n{body}"


def test_every_snippet_of_the_readme_in_a_language_comes_from_a_file():
    found = snippets(REPO / "README.md")
    assert sum(1 for source, _, _ in found if source) >= 3  # the job, the DAG, the Azkaban job
    for source, lang, body in found:
        assert source or lang in ("", "sh", "bash"), f"README: a {lang} snippet names no file it comes from:\n{body}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_to_the_repositorys_files_lead_to_them(page):
    for m in LINK.finditer(page.read_text()):
        target = m["target"]
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(REPO)}: the link to {target} leads nowhere"


def test_the_marker_check_can_fail(tmp_path):
    source = tmp_path / "job.yaml"
    source.write_text("name: a\ntasks:\n  worker: {instances: 2}\n")
    assert found_in("tasks:\n  worker: {instances: 2}\n", source)
    assert found_in("    tasks:\n      worker: {instances: 2}\n", source)  # indented as a block in a list
    assert not found_in("tasks:\n  worker: {instances: 3}\n", source)


def test_the_readmes_airflow_quick_start_is_what_make_run_runs():
    """The three commands a reader pastes set Airflow up as ``make run`` does (which runs the same
    DAG): the same DAG folder and settings, extras that exist, and the DAG make run tests."""
    import configparser

    readme = (REPO / "README.md").read_text()
    block = readme.split("<!-- airflow quick start -->\n```\n", 1)[1].split("```", 1)[0]
    install, export, run = block.strip().splitlines()
    makefile = (REPO / "Makefile").read_text()
    settings = dict(re.findall(r"(AIRFLOW__\w+)=(\S+)", makefile))
    for name, value in re.findall(r"(AIRFLOW__\w+)=(\S+)", export):
        assert settings[name].replace("$(CURDIR)", "$PWD") == value, name
    assert "AIRFLOW_HOME=" in export and "AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags" in export
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    extras = set(setup["options.extras_require"])
    asked = re.search(r"-e '\.\[([\w,]+)\]'", install)[1].split(",")
    assert set(asked) <= extras and {"airflow", "tensorflow", "data"} <= set(asked)
    assert run == "airflow db migrate && airflow dags test tony_mnist" and "dags test tony_mnist" in makefile
