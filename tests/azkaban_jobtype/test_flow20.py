"""Flow 2.0 projects (:mod:`azkaban_jobtype.flow20`): YAML flows, their layers of properties, and
their problems named by file, line and node."""
from __future__ import annotations

import shutil

from azkaban_jobtype.flow import load_project
from tests.azkaban_jobtype.test_flow import issues_of, props_of, write


def test_flow20_props_layer_job_over_embedded_flow_over_flow(fixtures_dir):
    with load_project(fixtures_dir / "azkaban-flow20") as p:
        job_a = props_of(p, "embedded:embedded_flow:jobA")
        assert job_a["command"] == "pwd" and job_a["type"] == "command"
        assert job_a["prop"] == "value"                            # embedded flow's config
        assert job_a["failure.emails"] == "noreply@foo.com"        # outer flow's config
        assert job_a["azkaban.flow.flowid"] == "embedded"
        assert job_a["azkaban.job.id"] == "jobA"
        assert job_a["azkaban.flow.nested.path"] == "embedded_flow:jobA"
        origin = next(i for i in p.instances() if i.id == "embedded:embedded_flow:jobA").props.origin("prop")
        assert str(origin) == "embedded.flow:14"


def test_flow20_values_are_the_yaml_text(tmp_path):
    (tmp_path / "p.project").write_text("azkaban-flow-version: 2.0\n")
    (tmp_path / "f.flow").write_text(
        "config:\n  quoted: 'true'\n  plain: true\n  number: 1.50\n  empty:\n  tilde: ~\n  text: 'null'\n"
        "nodes:\n  - name: j\n    type: TonyJob\n    config: {tony.worker.instances: 2, yes_no: yes}\n")
    with load_project(tmp_path) as p:
        props = props_of(p, "f:j")
    assert (props["quoted"], props["plain"], props["number"]) == ("true", "true", "1.50")
    assert (props["empty"], props["tilde"], props["text"]) == ("", "", "null")
    assert (props["tony.worker.instances"], props["yes_no"]) == ("2", "yes")


def test_flow20_problems_name_file_line_and_node(tmp_path):
    write(tmp_path, {"p.project": "azkaban-flow-version: 2.0\n", "f.flow": """\
nodes:
  - name: a
    type: command
    dependsOn: [b, ghost]
  - name: b
    type: command
    dependsOn: [a]
  - name: a
    type: noop
  - type: noop
  - name: c
  - name: d
    type: noop
    colour: red
    config:
      nested: {x: 1}
"""})
    found = issues_of(tmp_path)
    assert "f.flow:8: nodes[2].name: is used twice in this flow; node names must be unique within a flow (got 'a')" \
        in found
    assert "f.flow:10: nodes[3].name: is required" in found
    assert "f.flow:11: nodes[4].type: is required" in found
    assert any(line.startswith("f.flow:14: nodes[5].colour: unknown node field") for line in found)
    assert any(line.startswith("f.flow:16: nodes[5](d).config.nested: must be a single value") for line in found)
    assert "f.flow:4: node a.dependsOn: no node of that name in this flow (dependsOn names nodes of the same " \
           "flow) (got 'ghost')" in found
    assert "f.flow:7: node b.dependsOn: cyclic dependency a -> b -> a (got 'a')" in found
    with load_project(tmp_path) as project:
        assert "f" not in project.flows  # a flow with problems is not kept


def test_flow20_yaml_syntax_errors_name_the_line(tmp_path):
    write(tmp_path, {"p.project": "azkaban-flow-version: 2.0\n", "bad.flow": "nodes:\n  - name: a\n   type: x\n"})
    [issue] = issues_of(tmp_path)
    assert issue.startswith("bad.flow:3: document: invalid YAML")


def test_flow20_unknown_top_level_fields_and_missing_nodes(tmp_path):
    write(tmp_path, {"p.project": "azkaban-flow-version: 2.0\n", "f.flow": "config: {a: 1}\nnodez: []\n"})
    found = issues_of(tmp_path)
    assert any(line.startswith("f.flow:2: nodez: unknown flow field; allowed: config, nodes, trigger")
               for line in found)
    assert "f.flow:1: nodes: a flow needs a non-empty list of nodes" in found


def test_a_flow20_project_file_may_sit_in_a_subdirectory(tmp_path, fixtures_dir):
    shutil.copytree(fixtures_dir / "azkaban-flow20", tmp_path / "inner")
    with load_project(tmp_path) as project:
        assert project.version == "2.0" and "basic" in project.flows
        assert project.flows["basic"].source == "inner/basic.flow"
