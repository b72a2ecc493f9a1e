"""What the mini cluster is built with (:mod:`tony_workflow.minicluster.build`): the JDK it runs on,
found as Hadoop 3.5 needs it, and refused clearly when it cannot be."""
from __future__ import annotations

import pytest

from tony_workflow.errors import ClusterError
from tony_workflow.minicluster.build import MiniClusterError, find_java, tail


def test_the_machines_jdk_is_found_with_its_version(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    java = find_java()
    assert java.version >= 17 and java.java.name == "java" and java.home == java.java.parent.parent


def test_a_java_home_without_java_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(MiniClusterError, match=f"JAVA_HOME is {tmp_path}, but .* is not an executable"):
        find_java()
    assert issubclass(MiniClusterError, ClusterError)


def test_a_long_output_is_cut_to_its_last_lines():
    assert tail("\n".join(f"line {i}" for i in range(100)), lines=2) == "line 98\nline 99"
