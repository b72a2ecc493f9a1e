"""An Azkaban project as the job type reads it (:mod:`azkaban_jobtype.project`): the dependency cycles
Azkaban refuses at upload, and the properties Azkaban's executor gives a flow execution. Loading
whole projects is test_flow.py's and test_flow20.py's."""
from __future__ import annotations

import datetime

from azkaban_jobtype.project import dependency_cycles, runtime_props


def test_each_dependency_that_closes_a_cycle_is_named_with_its_path():
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["d"], "e": ["a"]}
    assert dependency_cycles(graph) == [("c", "a", "a -> b -> c -> a")]  # a self-dependency is the caller's
    assert dependency_cycles({"a": ["b"], "b": []}) == []


def test_a_flow_execution_gets_azkabans_runtime_properties():
    props = runtime_props("digits", "train")
    assert (props["azkaban.flow.flowid"], props["azkaban.flow.projectname"], props["azkaban.flow.execid"]) == (
        "train", "digits", "0")
    started = datetime.datetime.fromisoformat(props["azkaban.flow.start.timestamp"])
    assert abs((datetime.datetime.now(started.tzinfo) - started).total_seconds()) < 60
    assert props["azkaban.flow.start.year"] == started.strftime("%Y") and props["azkaban.flow.submituser"]
