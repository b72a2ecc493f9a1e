"""A job's inputs in its spec: the YAML ``data:`` section, TonY's ``tony.data.<input>.*`` keys in
XML and Azkaban's .job files, and every problem of them at once."""
from __future__ import annotations

import pytest

from tony_workflow.spec import SpecError, load_job
from tony_workflow.spec.data import parse_filter
from tony_workflow.spec.table import reference_markdown

BASE = {"name": "j", "executes": "t.py", "tasks": {"worker": {"instances": 2}}}


def test_the_yaml_section_becomes_tonys_keys():
    spec = load_job({**BASE, "data": {"train": {"path": ["hdfs:///a", "hdfs:///b/*.parquet"], "format": "parquet",
                                                "columns": ["x", "y"], "filter": "y >= 0", "remainder": "wrap"},
                                      "val": "hdfs:///v"}})
    assert spec.conf["tony.data.train.path"] == "hdfs:///a,hdfs:///b/*.parquet"
    assert spec.conf["tony.data.train.columns"] == "x,y"
    train, val = spec.data_inputs["train"], spec.data_inputs["val"]
    assert train.paths == ("hdfs:///a", "hdfs:///b/*.parquet") and train.columns == ("x", "y")
    assert train.filter.columns == ("y",) and train.remainder == "wrap"
    assert val.paths == ("hdfs:///v",) and val.format is None and val.remainder == "drop"


def test_tonys_xml_keys_declare_the_same_input(tmp_path):
    xml = tmp_path / "job.xml"
    xml.write_text("<configuration>"
                   "<property><name>tony.worker.instances</name><value>2</value></property>"
                   "<property><name>tony.data.train.path</name><value>hdfs:///clicks</value></property>"
                   "<property><name>tony.data.train.format</name><value>orc</value></property>"
                   "</configuration>")
    spec = load_job(str(xml), executes="t.py")
    assert spec.data_inputs["train"].format == "orc" and spec.data_inputs["train"].paths == ("hdfs:///clicks",)


def test_a_relative_path_in_a_spec_file_means_beside_it(tmp_path):
    (tmp_path / "job.yaml").write_text("name: j\nexecutes: t.py\ntasks: {worker: {instances: 1}}\n"
                                       "framework: standalone\ndata: {train: {path: data/train}}\n")
    spec = load_job(str(tmp_path / "job.yaml"))
    assert spec.data_inputs["train"].paths == (str(tmp_path / "data" / "train"),)


def test_every_problem_of_the_inputs_is_named_at_once():
    spec = load_job({**BASE, "data": {"train": {"path": "", "format": "parket", "filter": "x <", "remainder": "dorp"}},
                     "conf": {"tony.data.val.pth": "/v", "tony.data.x": "1"}})
    with pytest.raises(SpecError) as e:
        spec.validate()
    keys = {issue.key for issue in e.value.issues}
    assert {"tony.data.val.pth", "tony.data.x"} <= keys
    text = str(e.value)
    for said in ("needs a path", "did you mean parquet", "is not a filter", "did you mean drop",
                 "did you mean tony.data.val.path"):
        assert said in text, said


def test_an_unknown_field_in_the_yaml_section_is_named_with_the_closest():
    with pytest.raises(SpecError, match="data.train.colums: unknown field of an input .did you mean 'columns'"):
        load_job({**BASE, "data": {"train": {"path": "/p", "colums": ["x"]}}})


@pytest.mark.parametrize("text, columns", [("a < 1 and b == 'x'", ("a", "b")), ("not (c in (1, 2)) or d is None",
                                                                                 ("c", "d")), ("1 < e", ("e",))])
def test_filters_name_their_columns(text, columns):
    assert parse_filter(text).columns == columns


@pytest.mark.parametrize("text", ["a < b", "f(x) > 1", "a < 1 < b", "__import__('os')", "a in b"])
def test_a_filter_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        parse_filter(text)


def test_the_key_reference_lists_an_inputs_fields():
    ref = reference_markdown()
    for field in ("path", "format", "columns", "filter", "remainder"):
        assert f"| `{field}` |" in ref
