"""The embedded cluster's localization of TonY's resources (:mod:`tony_workflow.backends.local.localize`):
staged once, read-only, and linked into each container of the type that is given them."""
from __future__ import annotations

import os
import zipfile

import pytest

from tony_workflow.backends.local.localize import link_into, links, stage
from tony_workflow.spec import SpecError, load_job


def files(tmp_path):
    src = tmp_path / "given"
    (src / "dir" / "sub").mkdir(parents=True)
    (src / "dir" / "sub" / "deep.txt").write_text("deep")
    (src / "vocab.txt").write_text("words")
    with zipfile.ZipFile(src / "model.zip", "w") as z:
        z.writestr("123.xml", "<x/>")
    return src


def test_each_type_gets_its_own_and_every_containers_files(tmp_path):
    src = files(tmp_path)
    app = tmp_path / "app"
    app.mkdir()
    stage({"tony.containers.resources": f"{src}/vocab.txt,{src}/model.zip#archive,{src}/dir",
           "tony.worker.resources": f"{src}/model.zip::m.zip,{src}/vocab.txt::vocab.txt"}, app)
    assert sorted(links(app, "worker")) == ["dir", "m.zip", "model.zip", "vocab.txt"]
    assert sorted(links(app, None)) == sorted(links(app, "ps")) == ["dir", "model.zip", "vocab.txt"]
    wd = tmp_path / "container"
    wd.mkdir()
    link_into(app, "worker", wd)
    assert (wd / "model.zip" / "123.xml").read_text() == "<x/>"  # unpacked into a directory of its name
    assert zipfile.is_zipfile(wd / "m.zip")  # the same file under an alias, as it is
    assert (wd / "dir" / "sub" / "deep.txt").read_text() == "deep"  # a directory whole
    assert (wd / "vocab.txt").read_text() == "words"
    # One staged copy, read-only: the file is a hard link, a task cannot change what the next one gets.
    staged = links(app, "worker")["vocab.txt"]
    assert os.stat(wd / "vocab.txt").st_ino == os.stat(staged).st_ino
    assert not os.access(staged, os.W_OK) or os.geteuid() == 0
    assert not staged.stat().st_mode & 0o222


def test_a_job_whose_resource_cannot_be_staged_is_refused_and_leaves_nothing(tmp_path, tony_home):
    from tony_workflow.client import TonyClient
    (tmp_path / "broken.zip").write_text("not a zip")
    spec = load_job({"name": "r", "command": "true", "tasks": {"worker": {"instances": 1}},
                     "conf": {"tony.worker.resources": f"{tmp_path}/broken.zip#archive"}})
    with pytest.raises(SpecError, match=r"tony.worker.resources: .*broken.zip could not be given to the containers: "
                                        "is not a zip file"):
        TonyClient("local").submit(spec)
    assert list((tony_home / "local" / "apps").glob("application_*")) == []
