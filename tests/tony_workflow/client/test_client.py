"""The client (:mod:`tony_workflow.client`) where it refuses before anything runs: bad specs, paths
that name nothing, jobs that never fit, applications it does not know. Each refusal leaves the
embedded cluster as it found it (no application directory, nobody queued)."""
from __future__ import annotations

import json
import zipfile

import pytest

from tony_workflow.backends.base import NeverFits
from tony_workflow.backends.local.ledger import cluster_dir
from tony_workflow.client import TonyClient, executes_problem, load_job, venv_problem
from tony_workflow.errors import ConfigError, NotAnApplicationId, SpecError, UnknownApplication
from tony_workflow.spec import JobSpec


def nothing_submitted() -> bool:
    ledger = cluster_dir() / "ledger.json"
    queued = json.loads(ledger.read_text()).get("queue") if ledger.exists() else []
    return not list((cluster_dir() / "apps").iterdir()) and not queued


def test_an_unknown_application_and_a_malformed_id_are_told_apart(tony_home):
    with pytest.raises(UnknownApplication, match="application_1_0042"):
        TonyClient("local").attach("application_1_0042")
    with pytest.raises(NotAnApplicationId):
        TonyClient("local").attach("../../etc/passwd")
    assert TonyClient("local").record("application_1_0042") is None
    assert TonyClient("local").list() == []


def test_an_unknown_backend_names_the_allowed_ones():
    with pytest.raises(ConfigError, match="'local' and 'yarn'"):
        TonyClient("mesos")


def test_a_bad_spec_is_refused_whole_with_nothing_submitted(tony_home):
    # A spec made in code, not loaded (which refuses it already): submit checks it again.
    doc = load_job({"name": "bad", "command": "true", "tasks": {"worker": {"instances": 1}}}).to_dict()
    doc["conf"]["tony.worker.memory"] = "lots"
    spec = JobSpec.from_dict(doc)
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(spec)
    assert "tony.worker.memory" in str(e.value) and "'lots'" in str(e.value)
    assert nothing_submitted()


def test_paths_that_name_nothing_are_refused_with_nothing_submitted(tony_home, tmp_path):
    spec = load_job({"name": "paths", "command": "true", "src_dir": str(tmp_path / "missing"),
                     "python_venv": str(tmp_path / "venv.zip"), "tasks": {"worker": {"instances": 1}}})
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(spec)
    assert "src_dir" in str(e.value) and "python_venv" in str(e.value)
    assert nothing_submitted()


def test_a_script_missing_from_src_dir_is_refused_naming_the_closest_with_nothing_submitted(tony_home, tmp_path):
    (tmp_path / "src" / "models").mkdir(parents=True)
    (tmp_path / "src" / "train.py").write_text("")
    (tmp_path / "src" / "models" / "resnet.py").write_text("")
    spec = load_job({"name": "typo", "executes": "trian.py", "src_dir": str(tmp_path / "src"),
                     "tasks": {"worker": {"instances": 1}}})
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(spec)
    assert str(e.value).startswith("executes: is not a file in src_dir") and "(did you mean train.py?)" in str(e.value)
    assert "(got 'trian.py')" in str(e.value)
    assert nothing_submitted()

    def problem(executes: str, **job) -> str | None:
        return executes_problem(load_job({"name": "x", "executes": executes, "src_dir": str(tmp_path / "src"),
                                          "tasks": {"worker": {"instances": 1, **job}}}))
    assert problem("train.py") is None and problem("models/resnet.py --depth 50") is None
    assert "(did you mean models/resnet.py?)" in problem("python models/resnt.py")  # TonY's form, a command line
    assert problem("trian.py", command="python other.py") is None  # no task runs it
    assert problem("/opt/job/train.py") is None  # the nodes' own: only they can tell
    # A single-node job (no task) runs it in its ApplicationMaster, unless tony.am.command replaces it.
    single = {"name": "x", "executes": "trian.py", "src_dir": str(tmp_path / "src")}
    assert "(did you mean train.py?)" in executes_problem(load_job(single))
    assert executes_problem(load_job({**single, "conf": {"tony.am.command": "python other.py"}})) is None


def test_a_job_larger_than_the_machine_is_refused_naming_the_key(tony_home, local_site):
    local_site({"tony.local.memory": "2g", "tony.local.vcores": "4"})
    spec = load_job({"name": "huge", "command": "true", "tasks": {"worker": {"instances": 2, "memory": "4g"}}})
    with pytest.raises(NeverFits) as e:
        TonyClient("local").submit(spec)
    assert "tony.worker.memory" in str(e.value) and "tony.local.memory" in str(e.value)
    assert nothing_submitted()


def test_a_venv_is_a_directory_or_a_zip_that_unpacks_inside_itself(tmp_path):
    (tmp_path / "venv").mkdir()
    assert venv_problem(str(tmp_path / "venv")) is None
    assert "existing virtualenv" in venv_problem(str(tmp_path / "nowhere"))
    (tmp_path / "notzip").write_text("x")
    assert "zip file" in venv_problem(str(tmp_path / "notzip"))
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as z:
        z.writestr("../outside/bin/python", "x")
    assert "cannot be unpacked safely" in venv_problem(str(tmp_path / "evil.zip"))


def test_an_hdfs_virtualenv_is_taken_where_the_cluster_localizes_from_hdfs_only():
    # TonY's form: the zip in HDFS, localized by YARN on each node, never read by the client.
    assert venv_problem("hdfs://nn:8020/envs/tf.zip", remote=True) is None
    assert "needs YARN" in venv_problem("hdfs://nn:8020/envs/tf.zip")
    assert "hdfs:// URI of a zip" in venv_problem("s3://bucket/tf.zip", remote=True)
