"""The Hadoop 3.5.0 mini cluster: a real YARN + HDFS, started once for the module (``yarn`` tier),
and the command's error handling, which needs no cluster."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest
import requests

from tests.conftest import REPO, minicluster_missing, run_tony, wait_for
from tony_workflow import minicluster
from tony_workflow.minicluster.build import _POM, _sha256




@pytest.fixture(scope="module")
def cluster(hadoop_cluster):
    return hadoop_cluster


@pytest.fixture
def hadoop_env(cluster, monkeypatch, tmp_path):
    """The environment of a Hadoop client: HADOOP_CONF_DIR, JAVA_HOME and the cluster's bin on PATH."""
    for k, v in minicluster.client_env(cluster).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))  # skein writes its credentials there
    return dict(os.environ)


def site(conf_dir: str, name: str) -> dict[str, str]:
    root = ET.parse(Path(conf_dir) / name).getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


# -- against a running cluster --------------------------------------------------------------------

@pytest.mark.yarn
def test_cluster_json_and_client_conf_describe_the_running_cluster(cluster):
    d = Path(cluster["hadoop_conf_dir"]).parent
    assert json.loads((d / "cluster.json").read_text()) == cluster
    assert psutil.pid_exists(cluster["pid"])
    for key, scheme in (("rm_web", "http://"), ("webhdfs", "http://"), ("fs_default", "hdfs://")):
        assert cluster[key].startswith(scheme) and cluster[key].rsplit(":", 1)[1].isdigit()

    core, hdfs, yarn = (site(cluster["hadoop_conf_dir"], f"{n}-site.xml") for n in ("core", "hdfs", "yarn"))
    assert core["fs.defaultFS"] == cluster["fs_default"]
    assert "http://" + hdfs["dfs.namenode.http-address"] == cluster["webhdfs"]
    assert yarn["yarn.resourcemanager.address"] == cluster["rm_address"]
    assert yarn["yarn.resourcemanager.scheduler.address"] == cluster["rm_scheduler_address"]
    assert "http://" + yarn["yarn.resourcemanager.webapp.address"] == cluster["rm_web"]
    assert site(cluster["hadoop_conf_dir"], "resource-types.xml")["yarn.resource-types"] == "yarn.io/gpu"

    info = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/info", timeout=10).json()["clusterInfo"]
    assert info["state"] == "STARTED" and info["hadoopVersion"] == "3.5.0"
    assert requests.get(f"{cluster['webhdfs']}/webhdfs/v1/?op=GETFILESTATUS&user.name=tony",
                        timeout=10).json()["FileStatus"]["type"] == "DIRECTORY"


@pytest.mark.yarn
def test_the_nodemanager_offers_four_gpus_as_a_countable_resource(cluster):
    nodes = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/nodes", timeout=10).json()["nodes"]["node"]
    assert [n["state"] for n in nodes] == ["RUNNING"]
    total = {r["name"]: r for r in nodes[0]["totalResource"]["resourceInformations"]["resourceInformation"]}
    assert total["yarn.io/gpu"]["value"] == 4 and total["yarn.io/gpu"]["resourceType"] == "COUNTABLE"
    assert total["memory-mb"]["value"] == 16384 and total["vcores"]["value"] == 16
    # A ResourceManager with the DefaultResourceCalculator refuses to start with any resource type
    # beyond memory, so the GPU type being there also shows the DominantResourceCalculator is in use.
    scheduler = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/scheduler", timeout=10).json()
    assert scheduler["scheduler"]["schedulerInfo"]["type"] == "capacityScheduler"


@pytest.mark.yarn
def test_yarn_command_answers_classpath_glob_for_skein(cluster, hadoop_env):
    out = subprocess.run(["yarn", "classpath", "--glob"], capture_output=True, text=True, check=True,
                         env=hadoop_env).stdout.strip().split(":")
    assert out[0] == cluster["hadoop_conf_dir"]
    assert any(Path(p).name == "hadoop-yarn-client-3.5.0.jar" for p in out)
    assert all(Path(p).exists() for p in out)
    nodes = subprocess.run(["yarn", "node", "-list"], capture_output=True, text=True, env=hadoop_env, timeout=120)
    assert nodes.returncode == 0 and "RUNNING" in nodes.stdout, nodes.stderr


@pytest.mark.yarn
@pytest.mark.filterwarnings("ignore:Skein global security credentials not found")  # a fresh SKEIN_CONFIG
def test_skein_hello_world_application_succeeds(cluster, hadoop_env, tmp_path):
    skein = pytest.importorskip("skein")
    spec = skein.ApplicationSpec(
        name="hello", queue="default",
        master=skein.Master(resources=skein.Resources(memory="256 MiB", vcores=1)),
        services={"hello": skein.Service(resources=skein.Resources(memory="128 MiB", vcores=1),
                                         script="sleep 5; echo hi"),
                  # containers find the client configuration, as on a real cluster
                  "env": skein.Service(resources=skein.Resources(memory="128 MiB", vcores=1),
                                       script='echo "conf=$HADOOP_CONF_DIR"')})
    with skein.Client(log=str(tmp_path / "driver.log")) as client:
        app_id = client.submit(spec)

        def final_report():
            report = client.application_report(app_id)
            return report if str(report.state) in ("FINISHED", "FAILED", "KILLED") else None
        report = wait_for(final_report, timeout=180)
    assert (str(report.state), str(report.final_status)) == ("FINISHED", "SUCCEEDED"), report.diagnostics

    # The services' output, from the logs YARN aggregated into HDFS.
    def logs() -> str:
        r = subprocess.run(["yarn", "logs", "-applicationId", app_id, "-log_files", "hello.log,env.log"],
                           capture_output=True, text=True, env=hadoop_env, timeout=120)
        return r.stdout if "LogContents:\nhi" in r.stdout and "conf=" in r.stdout else ""
    out = wait_for(logs, timeout=60, interval=2)
    assert f"conf={cluster['hadoop_conf_dir']}\n" in out


@pytest.mark.yarn
def test_a_second_start_in_the_same_directory_is_refused(cluster):
    d = Path(cluster["hadoop_conf_dir"]).parent
    with pytest.raises(minicluster.MiniClusterError, match="already runs"):
        minicluster.start(d)
    assert minicluster.status(d) == cluster


@pytest.mark.yarn
def test_cli_start_recovers_from_a_crashed_cluster_and_stop_stops_it(tmp_path):
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    d = tmp_path / "mc"
    r = run_tony("minicluster", "start", "--dir", str(d), "--gpus", "2", "--memory-mb", "4096", "--vcores", "4")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["gpus_per_nm"] == 2 and "ready in" in r.stderr
    try:
        os.kill(first["pid"], signal.SIGKILL)  # a crash leaves cluster.json and the pid behind
        wait_for(lambda: not psutil.pid_exists(first["pid"]) or
                 psutil.Process(first["pid"]).status() == psutil.STATUS_ZOMBIE, timeout=30, interval=0.1)
        assert run_tony("minicluster", "status", "--dir", str(d)).returncode == 1

        r = run_tony("minicluster", "start", "--dir", str(d))
        assert r.returncode == 0, r.stderr
        second = json.loads(r.stdout)
        assert second["pid"] != first["pid"] and second["gpus_per_nm"] == 4
        assert json.loads(run_tony("minicluster", "status", "--dir", str(d)).stdout) == second
    finally:
        r = run_tony("minicluster", "stop", "--dir", str(d))
    assert r.returncode == 0 and "stopped" in r.stderr
    assert not psutil.pid_exists(second["pid"]) or psutil.Process(second["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not (d / "cluster.json").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{second['rm_web']}/ws/v1/cluster/info", timeout=5)
    r = run_tony("minicluster", "stop", "--dir", str(d))
    assert r.returncode == 0 and "no mini cluster was running" in r.stderr


# -- bad input: a clear message and exit status 2, never a traceback ------------------------------

def fake_jdk(tmp_path: Path, version: str = "17") -> Path:
    """A JAVA_HOME whose java reports ``version`` the way a real one does, and does nothing else."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    for tool in ("java", "javac"):
        (home / "bin" / tool).write_text(
            f"#!/bin/sh\necho '    java.specification.version = {version}' >&2\necho 'openjdk version' >&2\n")
        (home / "bin" / tool).chmod(0o755)
    return home


def assert_clean_failure(r, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("tony minicluster: "), r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def test_start_without_java_fails_cleanly(tmp_path):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"),
                 env={"JAVA_HOME": str(tmp_path / "no-jdk")})
    assert_clean_failure(r, "JAVA_HOME", "JDK 17")


def test_start_with_an_old_java_fails_cleanly(tmp_path):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"),
                 env={"JAVA_HOME": str(fake_jdk(tmp_path, "11"))})
    assert_clean_failure(r, "needs Java 17 or newer", "Java 11")


def test_start_when_maven_fails_reports_its_output(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text("#!/bin/sh\necho '[ERROR] Could not transfer artifact: Network is unreachable'\n"
                                 "exit 1\n")
    (bin_dir / "mvn").chmod(0o755)
    env = {"JAVA_HOME": str(fake_jdk(tmp_path)), "TONY_HADOOP_LIB": str(tmp_path / "lib"),
           "PATH": f"{bin_dir}:/usr/bin:/bin"}
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), env=env)
    assert_clean_failure(r, "Maven could not fetch the Hadoop 3.5.0 jars", "Network is unreachable")
    assert not (tmp_path / "lib" / ".tony-pom-sha256").exists()


def test_start_without_maven_and_without_cached_jars_fails_cleanly(tmp_path):
    env = {"JAVA_HOME": str(fake_jdk(tmp_path)), "TONY_HADOOP_LIB": str(tmp_path / "lib"), "PATH": "/nonexistent"}
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), env=env)
    assert_clean_failure(r, "Maven ('mvn') is needed", "TONY_HADOOP_LIB")


def test_start_on_a_port_in_use_fails_cleanly(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), "--rm-web-port", str(port))
    assert_clean_failure(r, f"port {port} (ResourceManager web) is not free")


def test_a_jvm_that_dies_while_starting_is_reported_with_its_log(tmp_path):
    jdk = fake_jdk(tmp_path)
    (jdk / "bin" / "java").write_text(
        "#!/bin/sh\ncase \"$*\" in *XshowSettings*) echo '    java.specification.version = 17' >&2; exit 0;; esac\n"
        "echo 'tony-minicluster: failed to start'; echo 'java.lang.OutOfMemoryError: Java heap space'; exit 1\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    # A cache that looks filled, so that neither Maven nor javac is needed.
    (lib / ".tony-pom-sha256").write_text(_sha256(_POM))
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"),
                 env={"JAVA_HOME": str(jdk), "TONY_HADOOP_LIB": str(lib)})
    assert_clean_failure(r, "exited with status 1 while starting", "OutOfMemoryError", "minicluster.log")
    assert minicluster.status(tmp_path / "mc") is None


def test_start_with_bad_sizes_fails_cleanly(tmp_path):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), "--nodemanagers", "0")
    assert_clean_failure(r, "nodemanagers must be an integer >= 1")


def test_stop_and_status_without_a_cluster(tmp_path):
    assert run_tony("minicluster", "stop", "--dir", str(tmp_path)).returncode == 0
    r = run_tony("minicluster", "status", "--dir", str(tmp_path))
    assert r.returncode == 1 and "no mini cluster is running" in r.stderr


def test_the_tony_command_loads_the_mini_cluster_only_for_tony_minicluster():
    code = ("import sys, tony_workflow.cli as cli; cli.build_parser().parse_args(['list']); "
            "print([m for m in sys.modules if m.startswith('tony_workflow.minicluster')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
    # The help `tony` shows for the command it does not load is the command's own.
    assert minicluster.cli._HELP in run_tony("--help", env={"COLUMNS": "200"}).stdout
    r = run_tony("minicluster", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: tony minicluster [-h] {start,stop,status,env}")
