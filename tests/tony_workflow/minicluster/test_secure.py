"""The secure mini cluster (``tony minicluster start --secure``): a KDC and Kerberized YARN and
HDFS, started once for the module, used the way a person would, with the ticket that
``tony minicluster env`` logs them in with, and refused to anyone without one."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest
import requests

from tests.conftest import REPO, minicluster_missing, run_tony, wait_for
from tony_workflow.process import login_name

pytestmark = pytest.mark.yarn


def _jvms_of(d: Path) -> list[psutil.Process]:
    """Live mini cluster JVMs started for the directory ``d``, found by scanning the machine."""
    found = []
    for p in psutil.process_iter():
        try:
            cmd = p.cmdline()
            if (p.status() != psutil.STATUS_ZOMBIE and "tonyworkflow.minicluster.MiniClusterMain" in cmd
                    and str(d) in cmd):
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A secure cluster started with the ``tony`` command, and stopped with it at the end."""
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    if not shutil.which("kinit"):
        pytest.skip("no kinit: the secure mini cluster's clients log in with MIT Kerberos's kinit "
                    "(Debian: apt-get install krb5-user, or make kerberos)")
    d = tmp_path_factory.mktemp("secure-minicluster")
    r = run_tony("minicluster", "start", "--secure", "--dir", str(d))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    yield info
    r = run_tony("minicluster", "stop", "--dir", str(d))
    assert r.returncode == 0, r.stderr
    assert not psutil.pid_exists(info["pid"]) or psutil.Process(info["pid"]).status() == psutil.STATUS_ZOMBIE
    assert _jvms_of(d) == []
    # The KDC lived in that JVM: nothing answers on its port any more.
    host, port = info["kdc"].rsplit(":", 1)
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=5).close()


def _shell(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs ``script`` in bash, as a person would type it; ``tony`` is this checkout's command."""
    tony = f"{shlex.quote(sys.executable)} -m tony_workflow.client.cli"
    return subprocess.run(["bash", "-c", f"tony() {{ {tony} \"$@\"; }}\nset -e\n{script}"], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env or dict(os.environ), check=False)


def _site(conf_dir: str, name: str) -> dict[str, str]:
    root = ET.parse(Path(conf_dir) / name).getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


def test_cluster_json_names_the_kdc_and_the_users_principal_and_keytab(secure):
    d = Path(secure["hadoop_conf_dir"]).parent
    assert json.loads((d / "cluster.json").read_text()) == secure
    assert secure["secure"] is True
    assert secure["principal"] == f"{login_name()}@{secure['realm']}"
    host, port = secure["kdc"].rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=10).close()

    krb5 = Path(secure["krb5_conf"]).read_text()
    assert f"default_realm = {secure['realm']}" in krb5 and f"kdc = {secure['kdc']}" in krb5
    # The keytabs hold the user's and the daemons' keys, in a directory only its owner may enter.
    assert Path(secure["keytab"]).parent == d / "kerberos" and (d / "kerberos").stat().st_mode & 0o077 == 0
    listed = subprocess.run(["klist", "-k", "-t", secure["keytab"]], capture_output=True, text=True, check=True,
                            env={**os.environ, "KRB5_CONFIG": secure["krb5_conf"]}).stdout
    assert secure["principal"] in listed

    assert _site(secure["hadoop_conf_dir"], "core-site.xml")["hadoop.security.authentication"] == "kerberos"
    assert _site(secure["hadoop_conf_dir"], "yarn-site.xml")["yarn.resourcemanager.principal"].endswith(
        "@" + secure["realm"])


def test_env_logs_the_user_in_and_the_clusters_commands_use_the_ticket(secure, tmp_path):
    d = Path(secure["hadoop_conf_dir"]).parent
    Path(secure["ccache"]).unlink(missing_ok=True)  # whatever start left, env must log in itself
    local = tmp_path / "hello.txt"
    local.write_text("hello, kerberos\n")
    r = _shell(f"""
        eval "$(tony minicluster env --dir {shlex.quote(str(d))})"
        echo "KRB5CCNAME=$KRB5CCNAME KRB5_CONFIG=$KRB5_CONFIG"
        klist
        hadoop fs -mkdir -p /user/secure/dir
        hadoop fs -put -f {shlex.quote(str(local))} /user/secure/dir/hello.txt
        hadoop fs -ls /user/secure/dir
        echo "cat: $(hadoop fs -cat /user/secure/dir/hello.txt)"
        yarn application -list
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"KRB5CCNAME={secure['ccache']} KRB5_CONFIG={secure['krb5_conf']}" in r.stdout
    assert secure["ccache"].startswith(str(d) + os.sep)
    assert f"Default principal: {secure['principal']}" in r.stdout
    assert "/user/secure/dir/hello.txt" in r.stdout
    # Reading the block back went through the DataNode's SASL handshake, with a block token.
    assert "cat: hello, kerberos" in r.stdout
    assert "Total number of applications" in r.stdout


def test_without_a_ticket_the_hadoop_command_is_refused(secure, tmp_path):
    env = {**os.environ, "HADOOP_CONF_DIR": secure["hadoop_conf_dir"], "KRB5_CONFIG": secure["krb5_conf"],
           "KRB5CCNAME": str(tmp_path / "no-tickets-here")}
    r = subprocess.run([str(Path(secure["bin_dir"]) / "hadoop"), "fs", "-ls", "/"], capture_output=True, text=True,
                       timeout=300, env=env, check=False)
    assert r.returncode != 0
    assert "Client cannot authenticate via:[TOKEN, KERBEROS]" in r.stderr, r.stderr[-3000:]


def test_web_servers_ask_for_spnego_and_accept_the_ticket(secure, monkeypatch):
    requests_gssapi = pytest.importorskip("requests_gssapi")
    urls = [f"{secure['webhdfs']}/webhdfs/v1/?op=GETFILESTATUS", f"{secure['rm_web']}/ws/v1/cluster/info"]
    for url in urls:
        r = requests.get(url, timeout=30)
        assert r.status_code == 401 and "Negotiate" in r.headers.get("WWW-Authenticate", ""), (url, r.status_code)

    r = run_tony("minicluster", "env", "--dir", str(Path(secure["hadoop_conf_dir"]).parent))
    assert r.returncode == 0, r.stderr
    exports = dict(shlex.split(line)[1].split("=", 1) for line in r.stdout.splitlines())
    for var in ("KRB5_CONFIG", "KRB5CCNAME"):  # as `eval` would, for the GSSAPI library in this process
        monkeypatch.setenv(var, exports[var])
    auth = requests_gssapi.HTTPSPNEGOAuth()
    status = requests.get(urls[0], auth=auth, timeout=30)
    assert status.status_code == 200, status.text
    assert status.json()["FileStatus"]["type"] == "DIRECTORY"
    cluster = requests.get(urls[1], auth=auth, timeout=30, headers={"Accept": "application/json"})
    assert cluster.status_code == 200, cluster.text
    assert cluster.json()["clusterInfo"]["state"] == "STARTED"


@pytest.mark.filterwarnings("ignore:Skein global security credentials not found")  # a fresh SKEIN_CONFIG
def test_a_containers_hdfs_client_gets_by_on_the_delegation_tokens_yarn_hands_it(secure, monkeypatch, tmp_path):
    """What a job on a Kerberized cluster relies on: the submitter logs in from its keytab, and the
    container, which has no ticket, reaches HDFS with the tokens obtained at submission."""
    skein = pytest.importorskip("skein")
    from tony_workflow import minicluster
    for k, v in minicluster.client_env(secure).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))
    monkeypatch.setenv("KRB5CCNAME", str(tmp_path / "no-tickets-here"))  # the keytab alone logs in
    hadoop = shlex.quote(str(Path(secure["bin_dir"]) / "hadoop"))
    script = f"""set -e
klist && exit 1 || echo "no ticket in the container"
echo "written in $CONTAINER_ID" > local.txt
{hadoop} fs -put -f local.txt /user/secure/from-container.txt
"""
    spec = skein.ApplicationSpec(
        name="secure-hello", queue="default",
        master=skein.Master(resources=skein.Resources(memory="256 MiB", vcores=1)),
        services={"put": skein.Service(resources=skein.Resources(memory="256 MiB", vcores=1), script=script)})
    with skein.Client(principal=secure["principal"], keytab=secure["keytab"], log=str(tmp_path / "driver.log"),
                      java_options=[f"-Djava.security.krb5.conf={secure['krb5_conf']}"]) as client:
        app_id = client.submit(spec)
        def ended():
            r = client.application_report(app_id)
            return r if str(r.state) in ("FINISHED", "FAILED", "KILLED") else None
        report = wait_for(ended, timeout=240, interval=1)
    assert (str(report.state), str(report.final_status)) == ("FINISHED", "SUCCEEDED"), report.diagnostics

    minicluster.login(secure)
    monkeypatch.setenv("KRB5CCNAME", secure["ccache"])
    cat = subprocess.run([str(Path(secure["bin_dir"]) / "hadoop"), "fs", "-cat", "/user/secure/from-container.txt"],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ), check=False)
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout.startswith(f"written in container_{app_id.removeprefix('application_')}_")
