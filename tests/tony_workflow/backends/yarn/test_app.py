"""A job's skein application (:mod:`tony_workflow.backends.yarn.app`), built without a cluster: what
each container gets and runs, with the runtime shipped or the nodes' own installation, the gang
asked for at start or by the gate."""
from __future__ import annotations

import pytest

skein = pytest.importorskip("skein")

from tony_workflow.backends.yarn.app import Shipment, application, prelude
from tony_workflow.spec import load_job


def spec(**tasks):
    return load_job({"name": "app", "framework": "tensorflow", "src_dir": None,
                     "tasks": tasks or {"worker": {"instances": 2, "memory": "512m", "command": "true"}},
                     "conf": {"tony.am.memory": "1g"}})


def files(*names):
    return {n: skein.File(f"hdfs://nn:8020/user/u/.tony/cache/d/{n}.zip", type="archive") for n in names}


def test_with_the_runtime_shipped_every_container_runs_the_nodes_python_from_it():
    shipment = Shipment("python3.11", files("runtime", "hadoop-conf", "env-numpy", "env-pyarrow"),
                        spec_env={"TONY_SPEC": "x"}, environment=["env-numpy", "env-pyarrow"])
    app = application(spec(), shipment, tags=["tony", "tony-gang:x"], at_start=[], spread={},
                      docker_env=lambda image: {})
    am, worker = app.services["tony-am"], app.services["tony-worker"]
    for service in (am, worker):
        assert 'export PYTHONPATH="$PWD/runtime/tony:$PWD/runtime/lib" TONY_RUNTIME="$PWD/runtime"' in service.script
        assert "exec python3.11 -m tony_workflow." in service.script
        assert {"runtime", "hadoop-conf"} <= set(service.files)
    # The job's environment, in parts, for its tasks only.
    assert {"env-numpy", "env-pyarrow"} <= set(worker.files) and "env-numpy" not in am.files
    assert 'TONY_ENVIRONMENT="$PWD/env-numpy:$PWD/env-pyarrow"' in worker.script
    assert "yarn.gate" in app.master.script and "runtime" in app.master.files  # it waits for its turn
    assert am.env["TONY_SPEC"] == "x" and worker.instances == 0 and am.instances == 0


def test_asked_at_start_the_master_runs_nothing_of_the_jobs_and_the_services_have_their_instances():
    shipment = Shipment("/opt/venv/bin/python", files("hadoop-conf"))
    app = application(spec(), shipment, tags=["tony"], at_start=["worker:0", "worker:1"], spread={},
                      docker_env=lambda image: {})
    assert app.master.script == "exec sleep 2147483647" and not app.master.files
    # skein's Java ApplicationMaster reads its JVM options from its environment.
    assert set(app.master.env) == {"JAVA_TOOL_OPTIONS"}
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(app.master.env["JAVA_TOOL_OPTIONS"].split())
    assert app.services["tony-worker"].instances == 2 and app.services["tony-am"].instances == 1
    assert app.services["tony-am"].env["TONY_YARN_ASKED"] == "worker*2"
    script = app.services["tony-worker"].script
    assert "PYTHONPATH" not in script and "exec /opt/venv/bin/python -m tony_workflow.task.executor" in script
    assert "spec.json" in app.services["tony-am"].script or "TONY_SPEC" not in app.services["tony-am"].env


def test_a_spread_type_gets_a_service_per_node():
    shipment = Shipment("python3.11", files("runtime", "hadoop-conf"))
    app = application(spec(), shipment, tags=["tony"], at_start=[], spread={"worker": ["h1", "h2"]},
                      docker_env=lambda image: {"YARN_CONTAINER_RUNTIME_TYPE": "docker"} if image else {})
    assert app.services["tony-worker-on-1"].nodes == ["h2"] and not app.services["tony-worker-on-1"].relax_locality
    assert app.services["tony-am"].env["TONY_YARN_SPREAD"] == "worker:h1,h2"


def test_the_prelude_writes_the_spec_out_of_the_environment_and_drops_it():
    head = prelude(Shipment("python3.11", files("runtime"), spec_env={"TONY_SPEC": "x"}))
    assert 'export HADOOP_CONF_DIR="$PWD/hadoop-conf"; printf %s "$TONY_SPEC" | base64 -d' in head
    assert "unset TONY_SPEC" in head
    assert "TONY_SPEC" not in prelude(Shipment("python3.11", files("spec.json")))


def test_each_type_gets_its_resources_and_every_container_the_common_ones():
    job = spec(worker={"instances": 1, "command": "true"}, ps={"instances": 1, "command": "true"})
    common, own = files("common"), {"vocab.txt": skein.File("hdfs://nn:8020/data/vocab.txt", type="file")}
    shipment = Shipment("python3", files("hadoop-conf"), resources={None: common, "worker": own})
    app = application(job, shipment, tags=["tony"], at_start=[], spread={}, docker_env=lambda image: {})
    worker, ps, am = (app.services[f"tony-{t}"] for t in ("worker", "ps", "am"))
    assert {"common", "vocab.txt"} <= set(worker.files) and worker.env["TONY_RESOURCES"] == "common,vocab.txt"
    assert "common" in ps.files and "vocab.txt" not in ps.files and ps.env["TONY_RESOURCES"] == "common"
    assert "common" in am.files and "vocab.txt" not in am.files  # the AM gets every container's


def test_a_containers_output_goes_to_yarns_stdout_and_stderr_in_its_first_log_directory(tmp_path):
    import subprocess
    first, second = tmp_path / "logs1", tmp_path / "logs2"
    first.mkdir(), second.mkdir()
    head = prelude(Shipment("python3.11", files("spec.json")))
    script = head + "echo to-out; echo to-err >&2"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "LOG_DIRS": f"{first},{second}"})
    assert done.returncode == 0 and done.stdout == done.stderr == ""
    assert (first / "stdout").read_text() == "to-out\n" and (first / "stderr").read_text() == "to-err\n"
    assert list(second.iterdir()) == []
    # Outside a YARN container (no LOG_DIRS) the output stays where it was.
    plain = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False,
                           env={"PATH": "/usr/bin:/bin"})
    assert plain.stdout == "to-out\n" and plain.stderr == "to-err\n"
