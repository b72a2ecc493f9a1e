"""The mini cluster's configuration files (:mod:`tony_workflow.minicluster.config`): settings laid
over each other file by file, and files written whole."""
from __future__ import annotations

import stat

from tony_workflow.minicluster.config import merged, write_file


def test_layers_of_settings_merge_file_by_file_the_last_on_top():
    base = {"yarn-site.xml": {"a": 1, "b": 2}, "core-site.xml": {"c": 3}}
    top = {"yarn-site.xml": {"b": 20}, "hdfs-site.xml": {"d": 4}}
    assert merged(base, top) == {"yarn-site.xml": {"a": 1, "b": 20}, "core-site.xml": {"c": 3},
                                 "hdfs-site.xml": {"d": 4}}
    assert base["yarn-site.xml"]["b"] == 2  # the layers themselves are left as they were


def test_a_file_is_written_whole_with_its_mode(tmp_path):
    path = tmp_path / "conf" / "bin" / "yarn"
    write_file(path, "#!/bin/sh\n", mode=0o755)
    assert path.read_text() == "#!/bin/sh\n" and stat.S_IMODE(path.stat().st_mode) == 0o755
    assert not list(path.parent.glob("*.part"))
