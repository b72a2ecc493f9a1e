"""skein's Java drivers, one per cluster and login for a user's processes
(:mod:`tony_workflow.backends.yarn.driver`): what tells two drivers apart, and a second process
reaching the first one's driver on a real cluster."""
from __future__ import annotations

import pytest

from tests.conftest import wait_for
from tony_workflow.backends.yarn.driver import _driver_key, _java_options, driver_running
from tony_workflow.process import alive as process_alive

PLAIN = {"yarn.resourcemanager.address": "rm:8032"}
SECURE = {**PLAIN, "hadoop.security.authentication": "kerberos"}


def test_drivers_differ_by_cluster_and_login():
    assert _driver_key(PLAIN, None, None) == _driver_key(dict(PLAIN), None, None)
    assert _driver_key(PLAIN, None, None) != _driver_key({"yarn.resourcemanager.address": "rm2:8032"}, None, None)
    assert _driver_key(PLAIN, "etl@EX", "/k") != _driver_key(PLAIN, None, None)


def test_on_a_secure_cluster_the_ticket_cache_tells_ticket_logins_apart(monkeypatch):
    monkeypatch.setenv("KRB5CCNAME", "FILE:/tmp/a")
    a = _driver_key(SECURE, None, None)
    monkeypatch.setenv("KRB5CCNAME", "FILE:/tmp/b")
    assert _driver_key(SECURE, None, None) != a
    assert _driver_key(SECURE, "etl@EX", "/k") == _driver_key(SECURE, "etl@EX", "/k")  # a keytab reads no cache
    assert not driver_running(SECURE)


def test_the_jvm_is_told_where_the_kdcs_configuration_is_unless_it_already_is(monkeypatch):
    monkeypatch.setenv("SKEIN_DRIVER_JAVA_OPTIONS", "-Xmx256m -Djava.security.krb5.conf=/etc/own.conf "
                       "-Dlog4j.configuration=file:/etc/own.properties -XX:+UseG1GC -XX:-TieredCompilation")
    assert _java_options(secure=True) == ["-Xmx256m", "-Djava.security.krb5.conf=/etc/own.conf",
                                          "-Dlog4j.configuration=file:/etc/own.properties", "-XX:+UseG1GC",
                                          "-XX:-TieredCompilation"]


def test_the_driver_jvm_gets_no_optimizing_compiler_and_one_collector_thread_unless_told(monkeypatch, tmp_path):
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))
    monkeypatch.setenv("SKEIN_DRIVER_JAVA_OPTIONS", "-Xmx256m")
    options = _java_options(secure=False)
    assert options[:3] == ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"], options


def test_hadoops_own_lines_are_logged_at_skeins_level_unless_the_user_configures_logging(monkeypatch, tmp_path):
    from tony_workflow.backends.yarn import driver

    monkeypatch.delenv("SKEIN_DRIVER_JAVA_OPTIONS", raising=False)
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))
    option = _java_options(secure=False)[-1]
    path = option.removeprefix("-Dlog4j.configuration=file:")
    assert path == str(tmp_path / "skein" / "tony-driver-log4j.properties")
    assert (tmp_path / "skein" / "tony-driver-log4j.properties").read_text() == driver.LOG4J
    assert "log4j.rootLogger=${skein.log.level}, console" in driver.LOG4J


class Client:
    """Stands in for a skein client in the process's table of drivers: what closing one does to a
    real driver (its JVM stops) is the yarn tier's."""

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_closing_one_clusters_drivers_leaves_the_others_running(monkeypatch):
    from tony_workflow.backends.yarn import driver
    other = {"yarn.resourcemanager.address": "rm2:8032"}
    clients = {_driver_key(PLAIN, None, None): Client(), _driver_key(PLAIN, "etl@EX", "/k"): Client(),
               _driver_key(other, None, None): Client()}
    monkeypatch.setattr(driver, "_DRIVERS", dict(clients))
    driver.close_drivers("rm:8032")
    assert [c.closed for c in clients.values()] == [True, True, False]
    assert driver_running(other) and not driver_running(PLAIN)
    driver.close_drivers()
    assert all(c.closed for c in clients.values()) and not driver_running(other)


def test_a_driver_that_cannot_start_says_what_is_missing(tmp_path, monkeypatch):
    from tony_workflow.backends.yarn.driver import check_driver_can_start, shared_driver
    from tony_workflow.errors import ConfigError
    with pytest.raises(ConfigError, match=f"JAVA_HOME={tmp_path} has no bin/java; set JAVA_HOME"):
        check_driver_can_start({"JAVA_HOME": str(tmp_path), "PATH": ""})
    with pytest.raises(ConfigError, match="no java on PATH"):
        check_driver_can_start({"PATH": str(tmp_path)})
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "java").chmod(0o755)
    with pytest.raises(ConfigError, match="needs Hadoop's `yarn` command on PATH"):
        check_driver_can_start({"JAVA_HOME": str(tmp_path), "PATH": str(tmp_path / "nowhere")})
    # Through the backend's own way in: no driver is started, and no traceback of skein's follows.
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="has no bin/java"):
        shared_driver({"yarn.resourcemanager.address": "absent:8032"}, tmp_path)
    assert not driver_running({"yarn.resourcemanager.address": "absent:8032"})


def _driver_jvms(under: int | None = None) -> set[int]:
    """The skein driver JVMs running on this machine (those ``under`` a process: its children),
    read from the process table."""
    import psutil
    found = set()
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        if "com.anaconda.skein.Driver" in (proc.info["cmdline"] or []) and under in (None, proc.info["ppid"]):
            found.add(proc.info["pid"])
    return found


SUBMITTER = """
import json, os, sys
from tony_workflow import hadoop
from tony_workflow.backends.yarn.driver import close_drivers, shared_driver
conf_dir = os.environ["HADOOP_CONF_DIR"]
client = shared_driver(hadoop.read_conf(conf_dir), conf_dir)
apps = client.get_applications(states=["RUNNING", "ACCEPTED", "FINISHED"])
print(json.dumps({"address": client.address, "own": client._proc is not None, "answered": isinstance(apps, list)}))
sys.stdout.flush()
if sys.argv[1:] == ["hold"]:
    sys.stdin.read()
close_drivers()
"""


@pytest.mark.yarn
@pytest.mark.filterwarnings("ignore:Skein global security credentials not found")  # a fresh SKEIN_CONFIG
def test_another_process_of_the_user_submits_through_the_running_driver(yarn_cluster, tmp_path, monkeypatch):
    import json
    import subprocess
    import sys

    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))  # this test's drivers alone are recorded there

    def submitter(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", SUBMITTER, *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    # Each process's own driver JVM is its child (other tests' drivers run beside on this machine).
    owner = submitter("hold")
    first = json.loads(owner.stdout.readline())
    assert first["own"] and first["answered"]
    started = _driver_jvms(under=owner.pid)
    assert len(started) == 1  # the owner's JVM
    # A second process for the same cluster and login connects to it: no second JVM.
    neighbour = submitter("hold")
    second = json.loads(neighbour.stdout.readline())
    assert second == {"address": first["address"], "own": False, "answered": True}
    assert _driver_jvms(under=neighbour.pid) == set()
    neighbour.stdin.close()
    assert neighbour.wait(60) == 0
    # Closing the neighbour left the owner's driver running; the owner's exit takes it away.
    assert all(process_alive(pid) for pid in started)
    owner.stdin.close()
    assert owner.wait(60) == 0
    wait_for(lambda: not (_driver_jvms() & started), timeout=30)
    # With the owner gone, the next process starts its own (and takes it away when it ends).
    third = submitter("hold")
    assert json.loads(third.stdout.readline())["own"]
    own = _driver_jvms(under=third.pid)
    assert len(own) == 1 and not own & started
    third.stdin.close()
    assert third.wait(60) == 0
    wait_for(lambda: not (_driver_jvms() & own), timeout=30)


def test_the_idle_time_of_a_detached_driver_comes_from_the_environment(monkeypatch):
    from tony_workflow.backends.yarn.driver import DEFAULT_IDLE_S, idle_seconds
    monkeypatch.setenv("TONY_DRIVER_IDLE_S", "30")
    assert idle_seconds() == 30
    monkeypatch.setenv("TONY_DRIVER_IDLE_S", "x")
    assert idle_seconds() == DEFAULT_IDLE_S
    monkeypatch.setenv("TONY_DRIVER_IDLE_S", "-5")
    assert idle_seconds() == 0


def _detached_drivers(skein_config: str) -> list:
    """The detached drivers of a skein configuration directory: the processes serving one."""
    import psutil
    found = []
    for p in psutil.process_iter():
        try:
            if "tony_workflow.backends.yarn.driver" in " ".join(p.cmdline()) and \
                    p.environ().get("SKEIN_CONFIG") == skein_config:
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.mark.yarn
@pytest.mark.filterwarnings("ignore:Skein global security credentials not found")  # a fresh SKEIN_CONFIG
def test_a_tony_commands_driver_waits_for_the_next_command_and_goes_when_idle(yarn_cluster, tmp_path):
    import json

    from tests.conftest import run_tony, sleeper_job
    skein_config = str(tmp_path / "skein")
    # Idle for 30 s before it goes: the next command comes well within that, even on a loaded
    # machine (8 s let a slow second command find it gone, and start another).
    env = {"SKEIN_CONFIG": skein_config, "TONY_DRIVER_IDLE_S": "30", "TONY_HOME": str(tmp_path / "home")}
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(sleeper_job("kept-driver", memory="256m", seconds=1)))
    first = run_tony("--backend", "yarn", "submit", str(spec), env=env)
    assert first.returncode == 0, first.stderr
    # The command has ended; its driver has not: a process of its own, with its JVM under it.
    [kept] = _detached_drivers(skein_config)
    jvms = _driver_jvms(under=kept.pid)
    assert len(jvms) == 1
    records = list((tmp_path / "skein" / "tony-drivers").glob("*.json"))
    assert len(records) == 1 and (records[0].parent.stat().st_mode & 0o077) == 0  # the user's alone
    leased = records[0].stat().st_mtime
    # The next command submits through it: no other driver, no other JVM, and its lease renewed.
    second = run_tony("--backend", "yarn", "submit", str(spec), env=env)
    assert second.returncode == 0, second.stderr
    assert [p.pid for p in _detached_drivers(skein_config)] == [kept.pid]
    assert _driver_jvms(under=kept.pid) == jvms and records[0].stat().st_mtime > leased
    # Idle past its time, it stops its JVM, removes its record and is gone.
    wait_for(lambda: not _detached_drivers(skein_config) and not (_driver_jvms() & jvms), timeout=150)
    assert not records[0].exists()


def test_skeins_credentials_live_under_tony_home_unless_skein_config_says(tmp_path):
    """skein would write ~/.skein; the yarn backend points it at $TONY_HOME/skein, and a
    SKEIN_CONFIG the user set wins."""
    import os
    import subprocess
    import sys

    code = ("import tony_workflow.backends.yarn.driver, skein; "
            "print(skein.properties.config_dir)")
    env = {k: v for k, v in os.environ.items() if k != "SKEIN_CONFIG"}
    own = subprocess.run([sys.executable, "-c", code], env={**env, "TONY_HOME": str(tmp_path / "home")},
                         capture_output=True, text=True, check=True)
    assert own.stdout.strip() == str(tmp_path / "home" / "skein")
    named = subprocess.run([sys.executable, "-c", code], env={**env, "SKEIN_CONFIG": str(tmp_path / "mine")},
                           capture_output=True, text=True, check=True)
    assert named.stdout.strip() == str(tmp_path / "mine")
