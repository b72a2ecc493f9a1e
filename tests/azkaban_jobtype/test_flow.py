"""Whole projects: Flow 1.0 and 2.0, every shared fixture, props as Azkaban layers them, and bad projects."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from azkaban_jobtype.flow import ProjectError, load_project
from azkaban_jobtype.props import load_properties, resolve
from tests.azkaban_jobtype.conftest import zip_project

from .conftest import EXAMPLE, FIXTURES

# What Azkaban refuses these fixture projects for on upload (they are generator output, not all of
# them complete projects); every other fixture project loads without a problem.
EXPECTED_ISSUES = {
    "hadoop-dsl-tensorflowjob": [("jobs1_job24.job:3: dependencies: no job of that name in the project "
                                  "(got 'jobs1_job23')")],
    "hadoop-dsl-expected/jobs1": ["jobs1_job2.job: type: is required",
                                  ("jobs1_job2.job:2: dependencies: no job of that name in the project "
                                   "(got 'jobs1_job1')")],
    "hadoop-dsl-expected/namespacedFlows": ["namespace1/basicFlow.flow: flow name: is used twice",
                                            "namespace2/basicFlow.flow: flow name: is used twice"],
    "hadoop-dsl-expected/readWriteRace2": [f"readWriteRace2_job{i}.job: type: is required" for i in range(1, 6)],
    "hadoop-dsl-expected/triangleDependencies": [f"triangleDependencies_job{i}.job: type: is required"
                                                 for i in range(1, 4)],
}


def fixture_projects() -> list[str]:
    if not FIXTURES.is_dir():
        return []
    names = ["azkaban-execpropstest", "azkaban-flow20", "azkaban-examples", "hadoop-dsl-tensorflowjob"]
    names += [f"hadoop-dsl-expected/{p.name}" for p in sorted((FIXTURES / "hadoop-dsl-expected").iterdir())]
    return names


def props_of(project, job_id: str) -> dict[str, str]:
    [instance] = [i for i in project.instances() if i.id == job_id]
    return resolve(instance.props)


# --------------------------------------------------------------------------------------------------
# The shared fixtures


def test_every_fixture_file_loads(fixtures_dir):
    files = [p for p in fixtures_dir.rglob("*") if p.is_file() and p.name != "README.md"]
    assert len(files) > 100
    loaded = {".job": 0, ".properties": 0}
    for path in files:
        suffix = path.suffix
        if suffix in (".flow", ".project"):
            continue  # read by the project loader below
        props = load_properties(path)
        assert props.flatten(), path  # every one of them sets something
        loaded[suffix] = loaded.get(suffix, 0) + 1
    # the Hadoop DSL's .tempprops file is written in the same syntax
    assert loaded[".job"] > 60 and loaded[".properties"] == 5 and loaded[".tempprops"] == 1
    projects = fixture_projects()
    flows = 0
    for name in projects:
        with load_project(fixtures_dir / name) as project:
            flows += sum(1 for f in project.flows.values() if f.source.endswith(".flow"))
            for instance in project.instances():
                assert instance.node.type is None or instance.props["type"] == instance.node.type
    every_flow = [p for p in files if p.suffix == ".flow"]
    # each .flow file becomes a flow (plus its embedded ones); namespacedFlows' two duplicates are refused
    assert flows >= len(every_flow) - 2


@pytest.mark.parametrize("name", fixture_projects())
def test_fixture_projects_load_with_exactly_azkabans_upload_errors(name):
    with load_project(FIXTURES / name) as project:
        assert project.flows, name
        found = [str(issue) for issue in project.issues]
        expected = EXPECTED_ISSUES.get(name, [])
        assert len(found) == len(expected), found
        for text in expected:
            assert any(line.startswith(text) for line in found), (text, found)


def test_flow_versions_and_flows(fixtures_dir):
    with load_project(fixtures_dir / "azkaban-flow20") as p:
        assert p.version == "2.0"
        assert sorted(p.flows) == ["basic", "embedded", "embedded:embedded_flow"]
        basic = p.flows["basic"]
        assert basic.nodes["jobC"].dependencies == ["jobA", "jobB"]
        assert basic.nodes["jobA"].props["command"] == 'echo "This is an echoed text."'
    with load_project(fixtures_dir / "azkaban-execpropstest") as p:
        assert p.version == "1.0"
        # a flow is named after the job nothing depends on
        assert sorted(p.flows) == ["job3", "job4"]
        assert sorted(p.flows["job3"].nodes) == ["innerflow", "job2", "job3"]
        assert p.flows["job3"].nodes["innerflow"].embedded_flow == "job4"
        ids = sorted(i.id for i in p.instances())
        assert ids == ["job3:innerflow:job1", "job3:innerflow:job4", "job3:job2", "job3:job3",
                       "job4:job1", "job4:job4"]
    with load_project(fixtures_dir / "hadoop-dsl-expected" / "subflows1") as p:
        # a dependency may name a job in another directory: job names are project-wide
        assert p.flows["subflows1"].nodes["subflows1_flow1__start"].dependencies == ["subflows1_job1"]
        assert "subflows1_job1" in p.flows["subflows1"].nodes


def test_execpropstest_resolves_as_the_fixture_readme_states(fixtures_dir):
    with load_project(fixtures_dir / "azkaban-execpropstest") as p:
        job2 = props_of(p, "job3:job2")
        assert {k: job2[k] for k in ("props1", "props2", "props3", "props4", "props7", "props8")} == {
            "props1": "shared1", "props2": "job2", "props3": "moo3", "props4": "shared4", "props7": "job7",
            "props8": "shared8"}
        # the executor runs a job in the directory of its file
        assert job2["working.dir"] == str(p.root / "subdir")
        # jobs in the root directory see the root chain only (moo4, not subdir's shared4)
        job1 = props_of(p, "job4:job1")
        assert (job1["props1"], job1["props3"], job1["props4"]) == ("job1", "moo3", "moo4")
        # inside the embedded flow, the embedding job's keys sit above the job's directory chain
        inner_job1 = props_of(p, "job3:innerflow:job1")
        assert (inner_job1["props5"], inner_job1["props6"], inner_job1["props8"]) == ("innerflow5", "innerflow6",
                                                                                      "job8")
        inner_job4 = props_of(p, "job3:innerflow:job4")
        assert (inner_job4["props4"], inner_job4["props5"], inner_job4["props9"]) == ("shared4", "innerflow5", "job9")


def test_flow10_and_its_flow20_translation_give_the_same_props(fixtures_dir):
    # loadPropsFlow is the Hadoop DSL's Flow 2.0 rendering of execpropstest.
    pairs = {"job3:job2": "loadPropsFlow:job2", "job3:job3": "loadPropsFlow:job3",
             "job3:innerflow:job1": "loadPropsFlow:innerflow:job1",
             "job3:innerflow:job4": "loadPropsFlow:innerflow:job4"}
    with load_project(fixtures_dir / "azkaban-execpropstest") as old, \
            load_project(fixtures_dir / "hadoop-dsl-expected" / "loadPropsFlow") as new:
        for old_id, new_id in pairs.items():
            a = {k: v for k, v in props_of(old, old_id).items() if k.startswith("props")}
            b = {k: v for k, v in props_of(new, new_id).items() if k.startswith("props")}
            assert a == b, (old_id, a, b)


def test_flow_parameters_override_flow_config_but_not_the_job(fixtures_dir):
    with load_project(fixtures_dir / "azkaban-flow20") as p:
        [job] = [i for i in p.instances({"failure.emails": "ops@example.com", "command": "x"})
                 if i.id == "basic:jobB"]
        assert job.props["failure.emails"] == "ops@example.com"
        assert job.props["command"] == "pwd"


def test_a_zipped_project_loads_like_its_directory(tmp_path):
    archive = tmp_path / "mnist.zip"
    zip_project(EXAMPLE, archive)
    with load_project(archive) as zipped, load_project(EXAMPLE) as plain:
        assert zipped.name == "mnist" and zipped.version == plain.version == "1.0"
        assert sorted(i.id for i in zipped.instances()) == sorted(i.id for i in plain.instances()) == [
            "mnist:mnist", "mnist:mnist_train"]
        root = zipped.root
        assert (root / "src" / "train.py").is_file()
    assert not root.exists()  # unpacked into a temporary directory, removed on close


# --------------------------------------------------------------------------------------------------
# Bad projects


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def issues_of(root: Path) -> list[str]:
    with load_project(root) as project:
        return [str(issue) for issue in project.issues]


def test_flow10_problems_name_file_and_key(tmp_path):
    found = issues_of(write(tmp_path, {
        "a.job": "type=command\ncommand=true\ndependencies=b\n",
        "b.job": "type=command\ncommand=true\ndependencies=a\n",
        "c.job": "type=command\ndependencies=nope, c\n",
        "sub/a.job": "type=noop\n",
        "e.job": "type=flow\n",
        "f.job": "type=flow\nflow.name=ghost\n",
    }))
    assert "sub/a.job: job name: is used twice (a.job and sub/a.job); job names must be unique in a project " \
           "(got 'a')" in found
    assert "c.job:2: dependencies: no job of that name in the project (got 'nope')" in found
    assert "c.job:2: dependencies: a job cannot depend on itself (got 'c')" in found
    assert "b.job:3: dependencies: is ambiguous: two jobs have that name (got 'a')" in found
    assert "e.job: flow.name: is required on a job of type flow: the name of the flow it runs" in found
    assert any(line.startswith("f.job:2: flow.name: no flow of that name in the project") for line in found)


def test_flow10_cycles_are_reported_even_when_no_flow_is_left(tmp_path):
    found = issues_of(write(tmp_path, {"a.job": "type=noop\ndependencies=b\n", "b.job": "type=noop\ndependencies=a\n"}))
    assert found == ["b.job:2: dependencies: cyclic dependency a -> b -> a (got 'a')"]


@pytest.mark.parametrize("text, problem", [
    ("azkaban-flow-version: '2.0'\n", "must be the number 2.0"),
    ("azkaban-flow-version: 2\n", "must be the number 2.0"),
    ("name: x\n", "is required in a .project file"),
])
def test_a_bad_project_file_is_refused(tmp_path, text, problem):
    (tmp_path / "p.project").write_text(text)
    with pytest.raises(ProjectError) as err:
        load_project(tmp_path)
    assert str(err.value).startswith("p.project: azkaban-flow-version: ") and problem in str(err.value)


def test_unsafe_zips_and_other_paths_are_refused(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escape.job", "type=noop\n")
    with pytest.raises(ProjectError, match="points outside the project"):
        load_project(archive)
    assert not (tmp_path.parent / "escape.job").exists()
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ProjectError, match="must be a project directory or a .zip file"):
        load_project(tmp_path / "notes.txt")
    with pytest.raises(ProjectError, match="no such file or directory"):
        load_project(tmp_path / "missing")


