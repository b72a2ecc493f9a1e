"""TonY's resources as a job names them (:mod:`tony_workflow.spec.resources`): entries in TonY's
forms, what each container gets, and what is refused before anything is submitted."""
from __future__ import annotations

import pytest

from tony_workflow.spec import SpecError, load_job
from tony_workflow.spec.resources import Resource, absolute, parse, resource_issues, resources_of


def test_tonys_forms_name_the_file_in_the_container():
    key = "tony.worker.resources"
    assert parse(key, "a/test.zip::test20.zip, a/test2.zip#archive,,a/common.zip,hdfs://nn:8020/yarn/lib") == [
        Resource("a/test.zip", "test20.zip", False, key), Resource("a/test2.zip", "test2.zip", True, key),
        Resource("a/common.zip", "common.zip", False, key), Resource("hdfs://nn:8020/yarn/lib", "lib", False, key)]
    both = parse(key, "data.tgz::data#archive")[0]
    assert (both.name, both.archive, both.remote) == ("data", True, False)
    assert parse(key, "hdfs:///models/m.zip")[0].remote and not parse(key, "file:///tmp/x")[0].remote
    with pytest.raises(ValueError, match="is not path, path::alias or path#archive"):
        parse(key, "a::b::c")
    with pytest.raises(ValueError, match="cannot be a file's name"):
        parse(key, "a::x/y")


def test_a_types_own_entry_wins_over_every_containers_by_name():
    conf = {"tony.containers.resources": "/d/vocab.txt,/d/common.zip", "tony.worker.resources": "/w/vocab.txt",
            "tony.ps.resources": ""}
    assert {r.name: r.source for r in resources_of(conf, "worker")} == {"vocab.txt": "/w/vocab.txt",
                                                                         "common.zip": "/d/common.zip"}
    assert {r.name: r.source for r in resources_of(conf, "ps")} == {"vocab.txt": "/d/vocab.txt",
                                                                     "common.zip": "/d/common.zip"}
    assert [r.source for r in resources_of(conf, None)] == ["/d/vocab.txt", "/d/common.zip"]  # the AM's


def test_relative_paths_are_made_absolute_with_aliases_and_archives_kept(tmp_path):
    assert absolute("x.zip::y#archive, d/f.txt, /abs, hdfs:///h", tmp_path) == ",".join([
        f"{tmp_path.resolve()}/x.zip::y#archive", f"{tmp_path.resolve()}/d/f.txt", "/abs", "hdfs:///h"])


def test_a_spec_files_resources_start_beside_it_and_overrides_at_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.yaml").write_text(
        "name: r\ncommand: 'true'\ntasks: {worker: {instances: 1}}\nresources: [vocab.txt, 'm.zip#archive']\n")
    monkeypatch.chdir(tmp_path)
    spec = load_job(tmp_path / "job" / "job.yaml", conf=["tony.worker.resources=w.txt::words"])
    assert spec.conf["tony.containers.resources"] == f"{tmp_path / 'job' / 'vocab.txt'},{tmp_path / 'job'}/m.zip#archive"
    assert spec.conf["tony.worker.resources"] == f"{tmp_path}/w.txt::words"


def test_what_cannot_be_given_is_refused_naming_the_key_and_why(tmp_path):
    (tmp_path / "vocab.txt").write_text("a")
    (tmp_path / "notes.txt").write_text("a")
    conf = {"tony.containers.resources": f"{tmp_path}/vocab.txt,{tmp_path}/gone.txt,{tmp_path}/notes.txt#archive",
            "tony.worker.resources": f"{tmp_path}/vocab.txt::src,hdfs:///data",
            "tony.wrker.resources": f"{tmp_path}/vocab.txt", "tony.ps.resources": "a::b::c"}
    said = {(i.key, i.message) for i in resource_issues(conf, {"worker", "ps"}, remote_ok=False)}
    assert said == {
        ("tony.containers.resources", f"{tmp_path}/gone.txt does not exist on this machine"),
        ("tony.containers.resources", (f"{tmp_path}/notes.txt is marked #archive, and only a .zip, .jar, .tar, "
                                      ".tar.gz, .tgz file can be unpacked")),
        ("tony.worker.resources", ("'src' is a name the runtime gives a container's own files: give the entry "
                                  "another with ::alias")),
        ("tony.worker.resources", ("hdfs:///data is on a cluster file system, which this backend cannot read "
                                  "without a Hadoop configuration (HADOOP_CONF_DIR)")),
        ("tony.wrker.resources", "names files for task type 'wrker', which the job does not have (it has ps, worker)"),
        ("tony.ps.resources", ("'a::b::c' is not path, path::alias or path#archive: each entry is path, path::alias "
                              "or path#archive"))}
    assert resource_issues({"tony.worker.resources": f"{tmp_path}/vocab.txt,{tmp_path}/vocab.txt"}, {"worker"},
                           True)[0].message == "two entries are named 'vocab.txt' in the container: give one another with ::alias"
    assert resource_issues({"tony.worker.resources": "hdfs:///data"}, {"worker"}, remote_ok=True) == []


def test_the_client_refuses_a_missing_resource_before_anything_is_submitted(tmp_path, tony_home):
    from tony_workflow.client import TonyClient
    spec = load_job({"name": "r", "command": "true", "tasks": {"worker": {"instances": 1}},
                     "conf": {"tony.containers.resources": str(tmp_path / "gone.zip")}})
    with pytest.raises(SpecError, match=r"tony.containers.resources: .*gone.zip does not exist on this machine"):
        TonyClient("local").submit(spec)
    assert list((tony_home / "local" / "apps").glob("application_*")) == []
