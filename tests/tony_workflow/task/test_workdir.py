"""The directory a task's command runs in (:mod:`tony_workflow.task.workdir`): TonY's layout, the
source beside the resources and venv, private to the container, also where YARN unpacks the
source once per node."""
from __future__ import annotations

import subprocess
import sys

from tony_workflow.task.workdir import user_directory


def yarn_container(tmp_path):
    """A container's directory as a NodeManager lays it out: the unpacked source shared by the
    node's containers (here a directory elsewhere, linked), the resources and venv beside it."""
    shared = tmp_path / "filecache" / "src"
    (shared / "pkg").mkdir(parents=True)
    (shared / "pkg" / "__init__.py").write_text("NAME = 'pkg'\n")
    (shared / "train.py").write_text("import os, pkg\nprint(pkg.NAME, sorted(os.listdir('.')))\n"
                                     "open('out.txt', 'w').write('mine')\n")
    (shared / "vocab.txt").write_text("from the source")
    c = tmp_path / "container"
    c.mkdir()
    (c / "src").symlink_to(shared)
    (c / "common.zip").write_text("zip")
    (c / "vocab.txt").write_text("from the resources")
    (c / "venv").mkdir()
    (c / "launch_container.sh").write_text("#!/bin/sh")
    return c, shared


def test_on_yarn_the_command_runs_among_the_source_resources_and_venv(tmp_path):
    c, shared = yarn_container(tmp_path)
    work = user_directory(c, {"TONY_WORKDIR": "src", "TONY_RESOURCES": "common.zip,vocab.txt"})
    assert work == c / "work"
    assert sorted(p.name for p in work.iterdir()) == ["common.zip", "pkg", "train.py", "venv", "vocab.txt"]
    # A resource wins over a source file of its name, as the later localization does under TonY.
    assert (work / "vocab.txt").read_text() == "from the resources"
    out = subprocess.run([sys.executable, "train.py"], cwd=work, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("pkg ")  # the source's packages import from beside the script
    # What the command writes is the container's own, never the node's shared copy of the source.
    assert (work / "out.txt").read_text() == "mine" and not (shared / "out.txt").exists()
    assert user_directory(c, {"TONY_WORKDIR": "src", "TONY_RESOURCES": "common.zip,vocab.txt"}) == work  # again


def test_where_the_container_holds_everything_it_is_the_directory(tmp_path):
    assert user_directory(tmp_path, {}) == tmp_path
    assert user_directory(tmp_path, {"TONY_WORKDIR": "."}) == tmp_path
