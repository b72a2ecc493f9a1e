"""The YARN backend on a Kerberized cluster: the secure mini cluster (a KDC, Kerberized YARN and HDFS,
SPNEGO on the ResourceManager's REST API and on WebHDFS), started once for the module.

The client logs in with the ticket ``kinit`` left, or with a job's tony.keytab.user and
tony.keytab.location; containers have neither and reach HDFS with the delegation token YARN hands
them. Everything the tests read back from the cluster they read as a user would: over SPNEGO."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import requests

from tests.conftest import (
    REPO,
    app_processes,
    minicluster_missing,
    own_minicluster,
    run_tony,
    sleeper_job,
    user_process,
    wait_for,
)
from tony_workflow.client import TonyClient, load_job

pytestmark = [pytest.mark.yarn]

MWMS = REPO / "examples" / "mnist_mwms" / "mnist_mwms.yaml"
#: The standard-library stand-in trainer: what is tested here is the secure cluster's part
#: (test_yarn_backend.py trains MWMS on YARN for real).
STAND_IN = REPO / "tests" / "stand_in" / "stand_in.yaml"
SMALL = ["tony.am.memory=512m", "tony.worker.memory=1g"]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A secure mini cluster, with this process's environment that of a user who ran
    ``eval "$(tony minicluster env)"``: the cluster's configuration, and a ticket in its cache."""
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    if not shutil.which("kinit"):
        pytest.skip("no kinit (MIT Kerberos's client tools: make kerberos)")
    pytest.importorskip("requests_gssapi")
    pytest.importorskip("skein")
    from tony_workflow import minicluster

    with own_minicluster(tmp_path_factory.mktemp("secure-yarn"), secure=True) as info:
        minicluster.login(info)
        yield info


def spnego():
    from requests_gssapi import HTTPSPNEGOAuth
    return HTTPSPNEGOAuth()


def rm_get(cluster, path: str) -> dict:
    r = requests.get(f"{cluster['rm_web']}/ws/v1/cluster{path}", auth=spnego(), timeout=60,
                     headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text[:500]
    return r.json()


def rm_app_ids(cluster) -> set[str]:
    return {a["id"] for a in (rm_get(cluster, "/apps").get("apps") or {}).get("app") or []}


def webhdfs_files(cluster, path: str) -> list[str]:
    """Every file below ``path``, listed through WebHDFS with this process's ticket."""
    r = requests.get(f"{cluster['webhdfs']}/webhdfs/v1{path}", params={"op": "LISTSTATUS"}, auth=spnego(),
                     timeout=60)
    if r.status_code == 404:
        return []
    assert r.status_code == 200, r.text[:500]
    out = []
    for st in r.json()["FileStatuses"]["FileStatus"]:
        child = f"{path}/{st['pathSuffix']}"
        out += webhdfs_files(cluster, child) if st["type"] == "DIRECTORY" else [child]
    return out


def webhdfs_read(cluster, path: str) -> str:
    r = requests.get(f"{cluster['webhdfs']}/webhdfs/v1{path}", params={"op": "OPEN"}, auth=spnego(), timeout=60)
    assert r.status_code == 200, r.text[:500]
    return r.text


def tony_dir(cluster) -> str:
    return f"/user/{cluster['principal'].split('@')[0]}/.tony"


def no_tickets(tmp_path: Path) -> dict[str, str]:
    """The environment of a user who has not run kinit: an empty ticket cache."""
    return {"KRB5CCNAME": str(tmp_path / "no-tickets-here")}


def test_without_a_login_nothing_is_submitted_and_the_error_says_how_to_log_in(secure, tmp_path):
    before = rm_app_ids(secure)
    submit = ("--backend", "yarn", "submit", str(MWMS), *[a for c in SMALL for a in ("--conf", c)])

    r = run_tony(*submit, env=no_tickets(tmp_path), timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    message = r.stderr.strip()
    assert "Traceback" not in r.stderr and message.startswith("tony: ") and "\n" not in message, r.stderr
    for words in ("hadoop.security.authentication=kerberos", "no Kerberos ticket", "kinit",
                  "tony.keytab.user", "tony.keytab.location", "nothing was submitted"):
        assert words in message, message

    # A principal the keytab does not hold: the keys and their values are named.
    r = run_tony(*submit, "--conf", "tony.keytab.user=nobody@EXAMPLE.COM", "--conf",
                 f"tony.keytab.location={secure['keytab']}", env=no_tickets(tmp_path), timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "tony.keytab.user='nobody@EXAMPLE.COM'" in r.stderr and secure["keytab"] in r.stderr
    assert "nothing was submitted" in r.stderr

    # Half a keytab login, or a keytab that is not there, is a bad spec.
    r = run_tony(*submit, "--conf", f"tony.keytab.user={secure['principal']}", env=no_tickets(tmp_path))
    assert r.returncode == 2 and "invalid job spec, nothing was submitted" in r.stderr, r.stderr
    assert "tony.keytab.location: must be set too" in r.stderr
    r = run_tony(*submit, "--conf", f"tony.keytab.user={secure['principal']}", "--conf",
                 f"tony.keytab.location={tmp_path / 'missing.keytab'}", env=no_tickets(tmp_path))
    assert r.returncode == 2 and "must be a readable keytab file" in r.stderr, r.stderr

    # Following needs a login too, and says so the same way.
    r = run_tony("--backend", "yarn", "list", env=no_tickets(tmp_path))
    assert r.returncode == 2 and "kinit" in r.stderr and "Traceback" not in r.stderr, r.stderr

    assert rm_app_ids(secure) == before


JVMS = """
import psutil
def jvms():
    return sorted(p.pid for p in psutil.Process().children(recursive=True) if "java" in p.name())
"""


def follow_elsewhere(code: str, env: dict[str, str]) -> dict:
    """Runs ``code`` in a fresh interpreter and returns the JSON object it prints last."""
    done = subprocess.run([sys.executable, "-c", JVMS + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env={**os.environ, **env}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_job_submitted_with_its_keytab_is_followed_elsewhere_over_spnego_without_a_jvm(secure, tmp_path):
    spec = tmp_path / "sleeper.json"
    job = sleeper_job("secure-sleeper")
    job["tasks"]["worker"]["command"] = "echo 'said in a secure container'; echo 'and on its stderr' >&2; sleep 600"
    spec.write_text(json.dumps(job))
    # Submitted by a user with no ticket: the job's own keys log the client in.
    r = run_tony("--backend", "yarn", "submit", str(spec), "--conf", f"tony.keytab.user={secure['principal']}",
                 "--conf", f"tony.keytab.location={secure['keytab']}", env=no_tickets(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    app_id = r.stdout.strip().splitlines()[-1]
    assert app_id.startswith("application_")
    assert rm_get(secure, f"/apps/{app_id}")["app"]["user"] == secure["principal"].split("@")[0]

    # Another process follows it with the user's ticket, and one more, with no ticket, with a
    # principal and keytab as an Airflow connection gives them: neither starts a JVM.
    follow = f"""
        import json, os, time
        from tony_workflow.backends.yarn.driver import _DRIVERS
        from tony_workflow.client import TonyClient
        client = TonyClient("yarn", **json.loads(os.environ.get("BACKEND_ARGS", "{{}}")))
        handle = client.attach("{app_id}")
        deadline = time.time() + 300
        while not ((st := handle.status()).state == "RUNNING" and st.tasks and st.tasks[0].state == "RUNNING"):
            assert time.time() < deadline, st.to_dict()
            time.sleep(1)
        auth = type(client.backend.rm.session.auth).__name__
        print(json.dumps({{"state": st.state, "task": st.tasks[0].state, "tracking": st.tracking_url, "auth": auth,
                          "listed": "{app_id}" in [s.application_id for s in client.list()], "jvms": jvms(),
                          "drivers": len(_DRIVERS)}}))
    """
    with_ticket = follow_elsewhere(follow, {})
    assert with_ticket["state"] == "RUNNING" and with_ticket["task"] == "RUNNING", with_ticket
    assert with_ticket["auth"] == "HTTPSPNEGOAuth" and with_ticket["listed"]
    assert with_ticket["jvms"] == [] and with_ticket["drivers"] == 0
    assert f"/proxy/{app_id}/" in with_ticket["tracking"]
    # YARN knows it as a TonY job, and its tracking URL (SPNEGO to the ResourceManager's proxy)
    # opens the job's page.
    app = rm_get(secure, f"/apps/{app_id}")["app"]
    assert app["applicationType"] == "TONY" and app_id in {a["id"] for a in rm_get(
        secure, "/apps?applicationTypes=TONY")["apps"]["app"]}
    page = wait_for(lambda: (r := requests.get(app["trackingUrl"], auth=spnego(), timeout=60)).status_code == 200
                    and app_id in r.text and r, timeout=60, interval=1)
    assert "State: <b>RUNNING" in page.text

    connection = {"principal": secure["principal"], "keytab": secure["keytab"]}
    with_keytab = follow_elsewhere(follow, {**no_tickets(tmp_path), "BACKEND_ARGS": json.dumps(connection)})
    assert with_keytab["state"] == "RUNNING" and with_keytab["jvms"] == [] and with_keytab["drivers"] == 0

    # Its logs while it runs are read from its NodeManager over SPNEGO, in a session of their own
    # (the ResourceManager's ticket on the same host is refused there as a replay).
    logs = run_tony("--backend", "yarn", "logs", app_id, "--task", "worker:0")
    assert logs.returncode == 0, logs.stdout + logs.stderr
    assert "==> worker:0/stdout <==" in logs.stdout and "said in a secure container" in logs.stdout, logs.stdout
    assert "and on its stderr" in logs.stdout, logs.stdout
    # Followed, the task's own lines come as it writes them, over SPNEGO too, and the follower
    # goes on until the job ends.
    follower = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "logs", app_id,
                                 "--follow", "--poll-interval", "0.5"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    followed: list[str] = []
    reading = threading.Thread(target=lambda: followed.extend(follower.stdout), daemon=True)
    reading.start()
    try:
        wait_for(lambda: {"[worker:0] said in a secure container\n", "[worker:0 stderr] and on its stderr\n"}
                 <= set(followed), timeout=120, describe=lambda: followed)
        assert follower.poll() is None, followed

        # Killed from a third process, through the AM and the ResourceManager's REST API.
        killed = follow_elsewhere(f"""
            import json
            from tony_workflow.client import TonyClient
            st = TonyClient("yarn").attach("{app_id}").kill()
            print(json.dumps({{"state": st.state, "jvms": jvms()}}))
        """, {})
        # The follower ends with the job, and says so with its exit code (1: it did not succeed).
        assert follower.wait(timeout=120) == 1, followed
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    reading.join(timeout=10)
    assert followed.count("[worker:0] said in a secure container\n") == 1, followed
    assert killed == {"state": "KILLED", "jvms": []}
    assert rm_get(secure, f"/apps/{app_id}")["app"]["finalStatus"] == "KILLED"
    # Ended, its logs are read from where log aggregation put them in HDFS (`yarn logs`, with the ticket).
    logs = run_tony("--backend", "yarn", "logs", app_id, "--task", "worker:0")
    assert logs.returncode == 0 and "said in a secure container" in logs.stdout, logs.stdout + logs.stderr
    assert rm_get(secure, f"/apps/{app_id}")["app"]["logAggregationStatus"] == "SUCCEEDED"
    # Ended, with no history server configured: its tracking URL leads to YARN's own page of it.
    moved = requests.get(app["trackingUrl"], auth=spnego(), timeout=60, allow_redirects=False)
    assert moved.status_code == 302 and moved.headers["Location"].endswith(f"/cluster/app/{app_id}"), moved.headers

    # Its record, from the job history in HDFS, read with no ticket: with a connection's keytab...
    recorded = follow_elsewhere(f"""
        import json, os
        from tony_workflow.client import TonyClient
        record = TonyClient("yarn", **json.loads(os.environ["BACKEND_ARGS"])).record("{app_id}")
        print(json.dumps({{"state": record and record["state"], "jvms": jvms()}}))
    """, {**no_tickets(tmp_path), "BACKEND_ARGS": json.dumps(connection)})
    assert recorded == {"state": "KILLED", "jvms": []}
    # ... and on the command line, with the keytab tony-site.xml names.
    from tony_workflow.hadoop import site_xml
    site = tmp_path / "site"
    site.mkdir()
    (site / "tony-site.xml").write_text(site_xml({"tony.keytab.user": secure["principal"],
                                                  "tony.keytab.location": secure["keytab"]}))
    r = run_tony("--backend", "yarn", "history", app_id, "--json",
                 env={**no_tickets(tmp_path), "TONY_CONF_DIR": str(site)})
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "KILLED", r.stderr[-2000:]

    # ... and its logs, from where log aggregation put them, with the keytab alone.
    logs = run_tony("--backend", "yarn", "logs", app_id, "--task", "worker:0",
                    env={**no_tickets(tmp_path), "TONY_CONF_DIR": str(site)})
    assert logs.returncode == 0 and "said in a secure container" in logs.stdout, logs.stdout + logs.stderr


def logged_in_as(secure, name: str, tmp_path: Path) -> dict[str, str]:
    """The environment of ``name`` (one of the cluster's other users) after kinit: a ticket cache of
    their own."""
    from tony_workflow.minicluster.secure import kinit
    ccache = tmp_path / f"krb5cc_{name}"
    user = secure["other_users"][name]
    kinit(secure["krb5_conf"], ccache, user["principal"], user["keytab"])
    return {"KRB5CCNAME": str(ccache)}


def test_only_those_the_acls_name_may_see_or_stop_a_job_and_the_rest_are_told_so(secure, tmp_path):
    spec = tmp_path / "shared.json"
    spec.write_text(json.dumps(sleeper_job("shared", {"tony.application.view-acls": "viewer",
                                                      "tony.application.modify-acls": "colleague"})))
    r = run_tony("--backend", "yarn", "submit", str(spec), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    app_id = r.stdout.strip().splitlines()[-1]
    owner = TonyClient("yarn").attach(app_id)
    wait_for(lambda: (s := owner.status()).state == "RUNNING" and s.tasks and s.tasks[0].state == "RUNNING",
             timeout=300, interval=1)

    # A stranger: YARN tells them nothing of the job and refuses to kill it; so does tony, in one line.
    outsider = logged_in_as(secure, "outsider", tmp_path)
    for command, verb in (("status", "see"), ("logs", "see"), ("kill", "see")):
        r = run_tony("--backend", "yarn", command, app_id, env=outsider, timeout=300)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        assert f"YARN does not let outsider {verb} application {app_id}" in r.stderr, r.stderr
        assert "tony.application.view-acls" in r.stderr
    # The ResourceManager's own word: the stranger's kill through its REST API is refused too.
    refused = follow_elsewhere(f"""
        import json
        from requests_gssapi import HTTPSPNEGOAuth
        import requests
        r = requests.put("{secure['rm_web']}/ws/v1/cluster/apps/{app_id}/state", json={{"state": "KILLED"}},
                         auth=HTTPSPNEGOAuth(), timeout=60)
        print(json.dumps({{"status": r.status_code}}))
    """, outsider)
    assert refused["status"] == 403, refused
    assert owner.status().state == "RUNNING"

    # The job's pages, behind the ResourceManager's proxy (past its warning to those who do not own
    # the application): skein's UI lets the view ACL's users through, and nobody else.
    page = owner.status().tracking_url
    assert f"/proxy/{app_id}/" in page

    def fetch(env):
        return follow_elsewhere(f"""
            import json
            import requests
            from requests_gssapi import HTTPSPNEGOAuth
            r = requests.get("{page}", params={{"proxyapproved": "true"}}, cookies={{"checked_{app_id}": "true"}},
                             auth=HTTPSPNEGOAuth(), timeout=60)
            print(json.dumps({{"status": r.status_code, "tasks": "<td>worker:0</td>" in r.text}}))
        """, env)
    assert fetch({})["status"] == 200  # the owner
    assert fetch(outsider)["status"] in (401, 403)

    # A teammate the view ACL names sees it, and may not stop it.
    viewer = logged_in_as(secure, "viewer", tmp_path)
    shown = fetch(viewer)
    assert shown["status"] == 200 and shown["tasks"], shown  # the job's page itself, its tasks listed
    seen = run_tony("--backend", "yarn", "status", app_id, "--json", env=viewer, timeout=300)
    assert seen.returncode == 0 and json.loads(seen.stdout)["state"] == "RUNNING", seen.stderr[-2000:]
    r = run_tony("--backend", "yarn", "kill", app_id, env=viewer, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert f"YARN does not let viewer kill application {app_id}" in r.stderr, r.stderr
    assert "tony.application.modify-acls" in r.stderr
    assert owner.status().state == "RUNNING"

    # A colleague the modify ACL names sees the job and stops it.
    colleague = logged_in_as(secure, "colleague", tmp_path)
    seen = run_tony("--backend", "yarn", "status", app_id, "--json", env=colleague, timeout=300)
    assert seen.returncode == 0 and json.loads(seen.stdout)["state"] == "RUNNING", seen.stderr[-2000:]
    killed = run_tony("--backend", "yarn", "kill", app_id, env=colleague, timeout=300)
    assert killed.returncode == 0 and "KILLED" in killed.stdout, killed.stderr[-2000:]
    assert rm_get(secure, f"/apps/{app_id}")["app"]["finalStatus"] == "KILLED"
    wait_for(lambda: not app_processes(app_id), timeout=120)


def hdfs_owners(cluster, path: str) -> dict[str, str]:
    """Every file and directory below ``path`` (relative to it) with its owner, through WebHDFS."""
    r = requests.get(f"{cluster['webhdfs']}/webhdfs/v1{path}", params={"op": "LISTSTATUS"}, auth=spnego(),
                     timeout=60)
    if r.status_code == 404:
        return {}
    assert r.status_code == 200, r.text[:500]
    out = {}
    for st in r.json()["FileStatuses"]["FileStatus"]:
        name = st["pathSuffix"]
        out[name] = st["owner"]
        if st["type"] == "DIRECTORY":
            out.update({f"{name}/{k}": v for k, v in hdfs_owners(cluster, f"{path}/{name}").items()})
    return out


def test_a_job_runs_as_its_proxy_user_whose_files_are_theirs_and_a_login_not_allowed_submits_nothing(secure,
                                                                                                    tmp_path):
    spec = tmp_path / "proxied.json"
    spec.write_text(json.dumps(sleeper_job("proxied", {"tony.application.proxy-user": "colleague"})))
    before = rm_app_ids(secure)
    # A stranger's login may not act as the colleague: one line, nothing submitted.
    r = run_tony("--backend", "yarn", "submit", str(spec), env=logged_in_as(secure, "outsider", tmp_path), timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "tony.application.proxy-user=colleague: the cluster does not let outsider act as colleague" in r.stderr
    assert "nothing was submitted" in r.stderr and rm_app_ids(secure) == before

    # The submitting user may: the ResourceManager names the colleague as the application's user.
    r = run_tony("--backend", "yarn", "submit", str(spec), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    app_id = r.stdout.strip().splitlines()[-1]
    assert rm_get(secure, f"/apps/{app_id}")["app"]["user"] == "colleague"
    handle = TonyClient("yarn").attach(app_id)
    wait_for(lambda: (s := handle.status()).state == "RUNNING" and s.tasks and s.tasks[0].state == "RUNNING",
             timeout=300, interval=1)
    # Its files are the colleague's: its directory (status, events, checkpoints) and the shipped runtime.
    own = hdfs_owners(secure, f"/user/colleague/.tony/{app_id}")
    assert own and set(own.values()) == {"colleague"}, own
    cached = hdfs_owners(secure, "/user/colleague/.tony/cache")
    assert cached and set(cached.values()) == {"colleague"}, cached
    submitter = secure["principal"].split("@")[0]
    assert not hdfs_owners(secure, f"/user/{submitter}/.tony/{app_id}")
    # So is the job as skein staged it for its containers.
    staged = hdfs_owners(secure, f"/user/colleague/.skein/{app_id}")
    assert staged and set(staged.values()) == {"colleague"}, staged
    # The user who submitted it follows and stops it (the job's ACLs name them).
    killed = run_tony("--backend", "yarn", "kill", app_id, timeout=300)
    assert killed.returncode == 0 and "KILLED" in killed.stdout, killed.stderr[-2000:]
    assert rm_get(secure, f"/apps/{app_id}")["app"]["finalStatus"] == "KILLED"
    wait_for(lambda: not app_processes(app_id), timeout=120)

    # Its history record is the colleague's, in their history, and names who submitted it...
    wait_for(lambda: any(app_id in k for k in hdfs_owners(secure, "/user/colleague/.tony/history")), timeout=120)
    kept = hdfs_owners(secure, "/user/colleague/.tony/history")
    assert set(kept.values()) == {"colleague"}, kept
    # ... and the submitter's `tony history` lists and shows it, with none of the colleague's own jobs.
    own_job = follow_elsewhere("""
        import json
        from tony_workflow.history import JobHistory, build_record
        from tony_workflow.storage import open_storage
        history = JobHistory(open_storage("hdfs:///user/colleague/.tony/history"), retention_s=0)
        status = {"application_id": "application_1_0001", "name": "mine", "state": "SUCCEEDED", "started_at": 1.0,
                  "finished_at": 2.0, "tasks": []}
        history.write({**build_record(status, [], user="colleague", conf={}, requested={}), "submitter": "colleague"})
        print(json.dumps({"ids": [r["application_id"] for r in history.list()]}))
    """, logged_in_as(secure, "colleague", tmp_path))
    assert sorted(own_job["ids"]) == sorted(["application_1_0001", app_id]), own_job
    listed = run_tony("--backend", "yarn", "history", "--json", timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    records = {r["application_id"]: r for r in json.loads(listed.stdout)}
    assert app_id in records and records[app_id]["user"] == "colleague", records
    assert "application_1_0001" not in records, "the colleague's own job is not the submitter's"
    shown = run_tony("--backend", "yarn", "history", app_id, "--json", timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert json.loads(shown.stdout)["submitter"] == submitter
    assert run_tony("--backend", "yarn", "history", "application_1_0001", timeout=300).returncode == 3


WRITE_TOKENS = """
import java.io.DataOutputStream;
import java.io.FileOutputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.security.Credentials;

/** Gets an HDFS delegation token as the logged-in user, as a job's submission does, and writes it
 *  in both of Hadoop's token file formats; prints it as WebHDFS takes it. */
public class WriteTokens {
  public static void main(String[] args) throws Exception {
    Credentials credentials = new Credentials();
    FileSystem.get(new Configuration()).addDelegationTokens("hadoop", credentials);
    try (DataOutputStream out = new DataOutputStream(new FileOutputStream(args[0]))) {
      credentials.writeTokenStorageToStream(out, Credentials.SerializedFormat.WRITABLE);
    }
    try (DataOutputStream out = new DataOutputStream(new FileOutputStream(args[1]))) {
      credentials.writeTokenStorageToStream(out, Credentials.SerializedFormat.PROTOBUF);
    }
    System.out.println(credentials.getAllTokens().iterator().next().encodeToUrlString());
  }
}
"""


def test_a_token_file_in_either_format_lets_webhdfs_in_without_a_ticket(secure, tmp_path, monkeypatch):
    from tony_workflow.kerberos import read_token_file
    from tony_workflow.storage import open_storage

    source = tmp_path / "WriteTokens.java"
    source.write_text(WRITE_TOKENS)
    hadoop = str(Path(secure["bin_dir"]) / "hadoop")
    classpath = subprocess.run([hadoop, "classpath", "--glob"], capture_output=True, text=True, check=True,
                               timeout=120).stdout.strip()
    java = [str(Path(secure["java_home"]) / "bin" / "java"), f"-Djava.security.krb5.conf={secure['krb5_conf']}"]
    written = subprocess.run([*java, "-cp", classpath, str(source), str(tmp_path / "writable"),
                              str(tmp_path / "protobuf")], capture_output=True, text=True, timeout=300, check=False)
    assert written.returncode == 0, written.stderr[-3000:]
    encoded_by_hadoop = written.stdout.strip().splitlines()[-1]

    for fmt in ("writable", "protobuf"):
        [token] = read_token_file(tmp_path / fmt)
        assert token.kind == "HDFS_DELEGATION_TOKEN" and token.service.endswith(secure["fs_default"].rsplit(":", 1)[1])
        assert token.url_string() == encoded_by_hadoop

        # A process with the token file and no ticket, as in a container.
        monkeypatch.setenv("KRB5CCNAME", str(tmp_path / "no-tickets-here"))
        monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", str(tmp_path / fmt))
        store = open_storage(f"hdfs:///user/{secure['principal'].split('@')[0]}/token-test")
        assert store.delegation == encoded_by_hadoop and store._session.auth is None
        local = tmp_path / f"{fmt}.txt"
        local.write_text(f"written with the {fmt} token\n")
        store.put(local, f"{fmt}.txt")
        store.get(f"{fmt}.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == f"written with the {fmt} token\n"
        monkeypatch.undo()

    # Without the token file or a ticket, the store says how to log in.
    monkeypatch.setenv("KRB5CCNAME", str(tmp_path / "no-tickets-here"))
    monkeypatch.delenv("HADOOP_TOKEN_FILE_LOCATION", raising=False)
    with pytest.raises(ValueError, match="kinit"):
        open_storage("hdfs:///user/token-test")


@pytest.mark.tf
def test_a_killed_worker_resumes_from_hdfs_on_the_secure_cluster(secure):
    yarn = TonyClient("yarn")
    spec = load_job(str(STAND_IN), conf=["tony.am.memory=512m", "tony.am.retry-count=1"],
                    task_params="--steps 100 --step-sleep 0.3 --save-every 10")
    h = yarn.submit(spec)
    ckpt = f"{tony_dir(secure)}/{h.app_id}/checkpoints"
    # The chief's executor, which has no ticket, mirrors its checkpoints to HDFS with the token.
    wait_for(lambda: any(f.endswith("/checkpoint") for f in webhdfs_files(secure, ckpt)), timeout=600, interval=2)
    before = wait_for(lambda: (s := h.status()).tensorboard_url and s, timeout=300)
    assert before.session_id == 0 and "/proxy/" in before.tensorboard_url

    container_group = os.getpgid(user_process(before.task("worker:1").pid).pid)
    assert container_group != os.getpgid(0)
    os.killpg(container_group, signal.SIGKILL)

    # The relaunched session's TensorBoard takes the same proxied address over, behind SPNEGO.
    def tensorboard_again():
        st = h.status()
        if st.session_id != 1 or st.state != "RUNNING" or st.tensorboard_url != before.tensorboard_url:
            return None
        page = requests.get(st.tensorboard_url, auth=spnego(), timeout=60)
        return page.status_code == 200 and "tensorboard" in page.text.lower()
    assert wait_for(tensorboard_again, timeout=400, interval=2)

    st = h.wait(poll_interval=2, timeout=900)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 1 and st.attempts == 2
    assert {t.container_id for t in st.tasks}.isdisjoint({t.container_id for t in before.tasks})
    assert not st.warnings, st.warnings  # no checkpoint store trouble

    files = webhdfs_files(secure, ckpt)
    assert any(f.endswith("/final/metrics.json") for f in files), files
    # The final status and the history record, both written from the AM's container with the token.
    assert json.loads(webhdfs_read(secure, f"{tony_dir(secure)}/{h.app_id}/status.json"))["state"] == "SUCCEEDED"
    [events] = [f for f in webhdfs_files(secure, f"{tony_dir(secure)}/history") if f.endswith(f"{h.app_id}/events.jsonl")]
    restored = [json.loads(line) for line in webhdfs_read(secure, events).splitlines()
                if '"checkpoint_restored"' in line]
    resumed = [e for e in restored if e.get("task") == "worker:0" and e.get("session") == 1]
    assert resumed and resumed[0]["step"] > 0, restored
    # `tony history` reads that record back over SPNEGO too.
    listed = run_tony("--backend", "yarn", "history", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert [r["state"] for r in json.loads(listed.stdout) if r["application_id"] == h.app_id] == ["SUCCEEDED"]


def test_the_history_server_takes_kerberos_logins_and_shows_each_user_what_the_acls_let_them(secure, tmp_path,
                                                                                            monkeypatch):
    from requests_gssapi import HTTPSPNEGOAuth

    from tests.conftest import stopped
    from tony_workflow.minicluster.secure import SPNEGO_PRINCIPAL

    spec = tmp_path / "seen.json"
    spec.write_text(json.dumps(sleeper_job("seen-by-viewer", {"tony.application.view-acls": "viewer"}, seconds=1)))
    done = run_tony("--backend", "yarn", "submit", str(spec), "--wait", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    app_id = done.stdout.split()[-2]
    keytab = Path(secure["krb5_conf"]).parent / "hadoop.keytab"  # the HTTP service's key is there
    bad = run_tony("--backend", "yarn", "history", "serve", "--spnego-keytab", str(tmp_path / "none.keytab"))
    assert bad.returncode == 2 and "the keytab" in bad.stderr and "is not there" in bad.stderr, bad.stderr
    serve = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "history", "serve",
                              "--port", "0", "--spnego-keytab", str(keytab), "--spnego-principal", SPNEGO_PRINCIPAL],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        link = serve.stdout.readline().strip()
        assert link.startswith("http://localhost:"), serve.stderr.read() if serve.poll() is not None else link
        base = link.split("/?")[0]
        unsigned = requests.get(f"{base}/jobs/{app_id}", headers={"Accept": "application/json"}, timeout=30)
        assert unsigned.status_code == 401 and unsigned.headers["WWW-Authenticate"] == "Negotiate"

        def as_user(name: str | None, path: str) -> requests.Response:
            if name is not None:
                monkeypatch.setenv("KRB5CCNAME", logged_in_as(secure, name, tmp_path)["KRB5CCNAME"])
            return requests.get(base + path, auth=HTTPSPNEGOAuth(), timeout=60)

        owner = as_user(None, "/")  # the submitting user, with the ticket of the cluster's login
        assert owner.status_code == 200 and app_id in owner.text, owner.text[:500]
        seen = as_user("viewer", f"/jobs/{app_id}")
        assert seen.status_code == 200 and "signed in as viewer" in seen.text and "seen-by-viewer" in seen.text
        refused = as_user("outsider", f"/jobs/{app_id}")
        assert refused.status_code == 403 and "outsider may not see" in refused.text
        assert app_id not in as_user("outsider", "/").text
    finally:
        assert stopped(serve) == 0


def test_a_jobs_input_in_hdfs_is_planned_over_spnego_and_read_with_the_containers_tokens(secure, tmp_path):
    # The client lists and inspects the input with its ticket; the workers read their shares with
    # the HDFS delegation tokens YARN gave their containers (no ticket there).
    from tests.tony_workflow.data.test_reader import N, write
    from tests.tony_workflow.jobs.test_data_jobs import ids_read, yarn_reader_job
    from tony_workflow.client.data import stage_input
    client = TonyClient("yarn")
    uri = stage_input(write(tmp_path / "d"), client.backend, "secure-input")
    out = tmp_path / "out"
    out.mkdir()
    st = client.submit(load_job(yarn_reader_job(uri, out))).wait(poll_interval=1, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    seen = ids_read(out, 2)
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1


def test_a_notebook_on_the_secure_cluster_is_used_through_its_url_and_its_kernels_hold_the_jobs_hdfs_tokens(
        secure, tmp_path, browser):
    # The command and the server reach the job with the user's ticket; the kernels, in the
    # container, hold what any task holds on a secure cluster: the job's delegation tokens.
    from tests.tony_workflow.jobs.test_lab import walk
    walk(tmp_path, browser, "yarn", kernel_checks={
        "import os; print(os.path.getsize(os.environ['HADOOP_TOKEN_FILE_LOCATION']) > 0)": "True"})


def test_a_notebook_runs_as_its_proxy_user_and_is_used_and_ended_by_the_user_who_started_it(secure, tmp_path,
                                                                                          browser):
    # YARN runs the container as the colleague (its USER); the user who started it reaches it
    # through its URL and ends it, as the job's ACLs let them.
    from tests.tony_workflow.jobs.test_lab import walk
    walk(tmp_path, browser, "yarn", kernel_checks={"import os; print(os.environ.get('USER'))": "colleague"},
         options=("--conf", "tony.application.proxy-user=colleague"))
