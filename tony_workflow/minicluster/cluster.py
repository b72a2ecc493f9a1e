"""A cluster's life: starting its JVM, waiting until YARN and HDFS answer, telling whether it runs,
stopping it, and the environment its clients need.

A cluster lives in one directory::

    cluster.json        where everything listens and what the cluster offers (written last: its
                        presence means "ready")
    conf/               a HADOOP_CONF_DIR for clients
    bin/yarn, bin/hadoop   enough of Hadoop's commands for clients (``yarn classpath --glob``, ...)
    server-conf/        the daemons' settings, first on their classpath
    logs/minicluster.log   the JVM's output
    run/                the pid and the addresses the daemons bound
    data/, hdfs/        YARN's and HDFS's working directories
    kerberos/           a secure cluster's krb5.conf, keytabs and ticket cache (see :mod:`.secure`)

All state is in those files, not in a Python object, so that ``tony minicluster stop`` in another
shell, or a test run after a crash, finds the cluster. The pid file keeps the JVM's start time next
to its pid: whether the cluster runs is asked of :func:`tony_workflow.process.alive` with both, so
a recycled pid is never taken for the cluster. Every port is a free one unless a fixed one is asked
for, so clusters started side by side (by parallel test runs, say) do not collide.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

from ..process import alive, detect_gpus, login_name, start_time, user_name
from .build import (
    HADOOP_VERSION,
    JAVA_MODULE_OPTIONS,
    MAIN_CLASS,
    MiniClusterError,
    Progress,
    ensure_hadoop_jars,
    ensure_launcher_classes,
    find_java,
    quiet,
    tail,
)
from .config import Settings, merged, write_client_conf, write_file, write_server_conf
from .isolation import check_isolation, hidden_paths, isolate
from .scheduling import Scheduling
from .secure import OTHER_USERS, Kerberos, find_kinit, kinit

__all__ = ["client_env", "login", "start", "status", "stop"]

_JVM_OPTIONS = (
    # Four daemons share this heap; a test cluster stays far below it, and a fixed cap keeps a CI
    # machine from handing the JVM a quarter of its memory.
    "-Xmx1g",
    # A test cluster lives for minutes: with the quick compiler alone it starts in about 8 s
    # instead of 11 on two cores, and the serial collector spares small machines a thread per core.
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
)


def _default_dir() -> Path:
    return Path(os.environ.get("TONY_HOME") or Path.home() / ".tony").expanduser() / "minicluster"


def _running(d: Path) -> psutil.Process | None:
    """The cluster's JVM if it still runs, else None."""
    try:
        rec = json.loads((d / "run" / "pid.json").read_text())
        pid, started = int(rec["pid"]), float(rec["started"])
        proc = psutil.Process(pid)
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None
    # Asked after taking hold of the pid: the recorded process predates that, so if it holds the
    # pid now it held it then, and ``proc`` (which psutil checks against reuse) is that process.
    return proc if alive(pid, started) else None


_OWNED = ("cluster.json", "conf", "server-conf", "bin", "run", "data", "hdfs", "logs", "kerberos")


def _clear(d: Path) -> None:
    """Removes what an earlier cluster left in ``d``; anything else in the directory is kept."""
    for name in _OWNED:
        p = d / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink()


def _log_tail(d: Path, lines: int = 30) -> str:
    try:
        text = (d / "logs" / "minicluster.log").read_text(errors="replace")
    except OSError:
        return "(no log written)"
    # The exception that ended the JVM says more than the lines of the orderly stop after it.
    failed = text.find("tony-minicluster: failed to start\n")
    if failed >= 0:
        return "\n".join(text[failed:].splitlines()[:lines])
    return tail(text, lines)


def _terminate(proc: psutil.Process, grace: float) -> None:
    """SIGTERM lets the JVM stop its daemons in order (and the NodeManager its containers); what is
    left after ``grace`` is killed, containers included.

    Not :func:`tony_workflow.process.kill_tree`, which signals the whole tree at once: here only
    the JVM gets SIGTERM, and being refused is an error to report rather than to pass over."""
    family: list[psutil.Process] = []
    try:
        family = proc.children(recursive=True)
        proc.terminate()
        proc.wait(grace)
    except psutil.TimeoutExpired:
        family += proc.children(recursive=True)
        with contextlib.suppress(psutil.Error):
            proc.kill()
            proc.wait(10)
    except psutil.NoSuchProcess:
        pass
    except psutil.AccessDenied:
        raise MiniClusterError(f"not allowed to stop the mini cluster's JVM (pid {proc.pid}); "
                               "stop it as the user who started it") from None
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _get_json(url: str) -> dict | None:
    try:
        r = requests.get(url, timeout=5, headers={"Accept": "application/json"})
        return r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


def rm_nodes(rm_web: str) -> list[dict] | None:
    """The ResourceManager's report of every node it knows, LOST and SHUTDOWN ones included, or
    None when it does not answer."""
    got = _get_json(f"{rm_web}/ws/v1/cluster/nodes?states=NEW,RUNNING,UNHEALTHY,DECOMMISSIONING,DECOMMISSIONED,"
                    "LOST,REBOOTED,SHUTDOWN")
    return None if got is None else ((got.get("nodes") or {}).get("node") or [])


def _yarn_ready(rm_web: str, nodemanagers: int, labels: dict[str, str]) -> bool:
    """Whether the ResourceManager runs with ``nodemanagers`` RUNNING nodes, those named in
    ``labels`` (node id -> label) carrying their label."""
    info = _get_json(f"{rm_web}/ws/v1/cluster/info")
    if not info or info.get("clusterInfo", {}).get("state") != "STARTED":
        return False
    running = {n.get("id"): n for n in rm_nodes(rm_web) or [] if n.get("state") == "RUNNING"}
    return len(running) >= nodemanagers and all(
        label in (running.get(node, {}).get("nodeLabels") or []) for node, label in labels.items())


def _hdfs_ready(webhdfs: str) -> bool:
    st = _get_json(f"{webhdfs}/webhdfs/v1/?op=GETFILESTATUS&user.name={user_name()}")
    return bool(st and st.get("FileStatus", {}).get("type") == "DIRECTORY")


def _asks_for_spnego(url: str) -> bool:
    """Whether the secured web server at ``url`` answers, turning a caller without a ticket away."""
    try:
        r = requests.get(url, timeout=5)
    except requests.RequestException:
        return False
    return r.status_code == 401 and "Negotiate" in r.headers.get("WWW-Authenticate", "")


def _check_ports(ports: dict[str, int]) -> None:
    """Fails early, naming the daemon, when a requested port is taken (port 0 never is)."""
    for what, port in ports.items():
        if not port:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # As Hadoop's servers do, so that connections of a cluster just stopped do not count.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as e:
                raise MiniClusterError(f"port {port} ({what}) is not free: {e.strerror}; pick another, "
                                       "or 0 for any free port") from None


def start(directory: str | os.PathLike[str] | None = None, *, nodemanagers: int = 1, gpus_per_nm: int | None = None,
          nm_memory_mb: int = 16384, nm_vcores: int = 16, timeout: float = 180.0, rm_port: int = 0,
          rm_web_port: int = 0, namenode_port: int = 0, webhdfs_port: int = 0, secure: bool = False,
          preemption: bool = False, node_labels: dict[str, list[int]] | None = None, max_priority: int = 0,
          node_expiry_s: float | None = None, distinct_hosts: bool = False, isolated: bool = False,
          memory_limits: bool = False, datanodes: int = 1, progress: Progress = quiet) -> dict:
    """Starts a mini cluster in ``directory`` (default ``$TONY_HOME/minicluster``) and returns its
    ``cluster.json``, once YARN has ``nodemanagers`` RUNNING NodeManagers and WebHDFS answers.

    Each NodeManager advertises ``gpus_per_nm`` ``yarn.io/gpu`` (default: this machine's GPUs, as
    ``nvidia-smi`` lists them; more are stand-ins, declared without any GPU behind them, which
    ``cluster.json`` says as ``gpus_stand_in``),
    ``nm_memory_mb`` MiB and ``nm_vcores`` vcores (virtual: not checked against the machine's
    cores). ``timeout`` bounds the wait for the daemons, not the one-time jar download. The
    ResourceManager's RPC and web ports and the NameNode's RPC and HTTP (WebHDFS) ports are free
    ones unless given. ``secure`` runs a KDC too and puts every daemon behind Kerberos (see
    :mod:`.secure`); its ``cluster.json`` then names the submitting user's principal and keytab,
    whom :func:`login` logs in.

    What the scheduler offers beyond one queue is off unless asked for (see :mod:`.scheduling`):
    ``preemption`` (the queues ``default`` and ``urgent`` and the preemption monitor),
    ``node_labels`` (label -> indexes of the NodeManagers carrying it, as an exclusive label),
    ``max_priority`` (the highest application priority granted), ``node_expiry_s`` (how soon a
    silent NodeManager is declared LOST; see :func:`.nodes.stop_nodemanager`) and
    ``distinct_hosts`` (NodeManager INDEX on 127.0.0.(INDEX+1), so that YARN can place containers
    on distinct hosts; not with ``secure``, whose principals name localhost). ``cluster.json``
    says what the cluster offers, and lists the NodeManagers by index.

    ``memory_limits`` makes the NodeManagers kill a container whose processes hold more physical
    memory than it was given (YARN's default, off otherwise: the processes of every container of
    a mini cluster share this one machine's memory, whatever the NodeManagers advertise).

    Its containers see this machine's files, this project and its virtualenv included: its client
    configuration says so (``tony.yarn.python``, the interpreter this was started with), and jobs
    run from them, as on a cluster whose nodes have the project installed. ``isolated`` makes it
    a cluster whose nodes have nothing but a base Python (see :func:`hidden_paths`): nothing is
    said, and jobs bring their runtime and environment.

    ``datanodes`` DataNodes hold HDFS's blocks, each block on as many of them (up to three) as the
    client's ``dfs.replication`` then says; :func:`.nodes.stop_datanode` stops one as if its machine
    had died. ``cluster.json``'s ``datanodes`` lists them by index.

    Raises :class:`MiniClusterError` when a cluster already runs there or it cannot start.
    """
    real_gpus = len(detect_gpus())
    gpus_per_nm = real_gpus if gpus_per_nm is None else gpus_per_nm
    for name, value, least in (("nodemanagers", nodemanagers, 1), ("datanodes", datanodes, 1),
                               ("gpus_per_nm", gpus_per_nm, 0),
                               ("nm_memory_mb", nm_memory_mb, 1024), ("nm_vcores", nm_vcores, 1),
                               ("rm_port", rm_port, 0), ("rm_web_port", rm_web_port, 0),
                               ("namenode_port", namenode_port, 0), ("webhdfs_port", webhdfs_port, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise MiniClusterError(f"{name} must be an integer >= {least}, got {value!r}")
    if timeout <= 0:
        raise MiniClusterError(f"timeout must be positive, got {timeout!r}")
    scheduling = Scheduling(preemption=bool(preemption), node_labels=dict(node_labels or {}),
                            max_priority=max_priority, node_expiry_s=node_expiry_s,
                            distinct_hosts=bool(distinct_hosts))
    scheduling.check(nodemanagers)
    if secure and distinct_hosts:
        raise MiniClusterError("--distinct-hosts (distinct_hosts) cannot be used with --secure: the daemons' "
                               "Kerberos principals name localhost")
    ports = {"ResourceManager RPC": rm_port, "ResourceManager web": rm_web_port, "NameNode RPC": namenode_port,
             "WebHDFS": webhdfs_port}
    if any(p > 65535 for p in ports.values()):
        raise MiniClusterError(f"ports must be below 65536, got {ports}")
    used = [p for p in ports.values() if p]
    if len(used) != len(set(used)):
        raise MiniClusterError(f"each port must be different, got {ports}")
    d = Path(directory or _default_dir()).expanduser().resolve()
    if d.exists() and not d.is_dir():
        raise MiniClusterError(f"{d} exists and is not a directory")
    hidden = hidden_paths() if isolated else []
    if isolated:
        check_isolation(d, hidden)
    running = _running(d)
    if running:
        raise MiniClusterError(f"a mini cluster already runs in {d} (pid {running.pid}); "
                               f"stop it first with: tony minicluster stop --dir {shlex.quote(str(d))}")
    _check_ports(ports)
    if secure:
        find_kinit()
    _clear(d)

    java = find_java()
    lib = ensure_hadoop_jars(progress=progress)
    classes = ensure_launcher_classes(lib, java, progress=progress)

    server_conf, conf, bin_dir, run, logs = (d / "server-conf", d / "conf", d / "bin", d / "run", d / "logs")
    krb = Kerberos(d, login_name()) if secure else None
    if krb:
        krb.prepare()
    server_extra: list[Settings] = [scheduling.server_settings(d), krb.server_settings() if krb else {},
                                    # MiniYARNCluster turns the check off unless told to leave it be;
                                    # with no memory cgroups, the NodeManager's own monitor enforces it.
                                    {"yarn-site.xml": {"yarn.nodemanager.pmem-check-enabled": True,
                                                       "yarn.minicluster.control-resource-monitoring": True,
                                                       "yarn.nodemanager.resource.memory.enforced": False}}
                                    if memory_limits else {}, _hdfs_settings(datanodes, server=True)]
    write_server_conf(server_conf, d, lib, gpus=gpus_per_nm, memory_mb=nm_memory_mb, vcores=nm_vcores,
                      rm_port=rm_port, rm_web_port=rm_web_port, extra=merged(*server_extra))
    for p in (run, logs, d / "data"):
        p.mkdir(parents=True, exist_ok=True)

    cmd = [str(java.java), *_JVM_OPTIONS, *JAVA_MODULE_OPTIONS,
           "-Djava.net.preferIPv4Stack=true",
           f"-Dlog4j.configuration=file:{server_conf / 'log4j.properties'}",
           # MiniYARNCluster puts its NodeManagers' work directories under this.
           f"-Dtest.build.data={d / 'data'}",
           "-cp", os.pathsep.join([str(server_conf), str(classes), str(lib / "*")]),
           MAIN_CLASS, str(d), str(nodemanagers), str(namenode_port), str(webhdfs_port),
           *(krb.launcher_args() if krb else ())]
    # The daemons read their settings from the classpath (server-conf) only. JAVA_HOME and
    # HADOOP_CONF_DIR are for the containers, which the NodeManager gives its own values of these,
    # as on a real cluster.
    env = {**os.environ, "JAVA_HOME": str(java.home), "HADOOP_CONF_DIR": str(conf)}
    for var in ("YARN_CONF_DIR", "CLASSPATH", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        env.pop(var, None)
    if isolated:
        cmd, env = isolate(cmd, env, hidden)
    progress(f"starting Hadoop {HADOOP_VERSION} (YARN + HDFS{' + a KDC, all Kerberized' if krb else ''}) in {d}")
    t0 = time.monotonic()
    with open(logs / "minicluster.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=d / "data", env=env, start_new_session=True)
    # Taken before anything can reap the child, so a later kill never reaches a recycled pid.
    ps = psutil.Process(proc.pid)
    write_file(run / "pid.json", json.dumps({"pid": proc.pid, "started": start_time(proc.pid)}) + "\n")

    def fail(why: str) -> MiniClusterError:
        _terminate(ps, grace=15)
        proc.poll()
        log_tail = _log_tail(d)
        if "java.net.BindException" in log_tail:
            why += " because a port was taken (another process bound it after the check)"
        return MiniClusterError(f"{why}\n--- {logs / 'minicluster.log'} ---\n{log_tail}")

    try:
        deadline = t0 + timeout
        addresses_file = run / "addresses.json"
        while not addresses_file.exists():
            if proc.poll() is not None:
                raise fail(f"the mini cluster's JVM exited with status {proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise fail(f"the mini cluster did not start within {timeout:.0f} s")
            time.sleep(0.25)
        addresses = json.loads(addresses_file.read_text())
        if krb:
            # SPNEGO asks for HTTP/<the host in the URL>, and the KDC only knows HTTP/localhost.
            addresses["namenode_http"] = addresses["namenode_http"].replace("127.0.0.1:", "localhost:", 1)

        # The nodes of a cluster that is not isolated have this project installed: what runs it.
        nodes_python = {} if isolated else {"yarn-site.xml": {"tony.yarn.python": sys.executable}}
        client_extra: list[Settings] = [scheduling.client_settings(), krb.client_settings() if krb else {},
                                        nodes_python, _hdfs_settings(datanodes, server=False)]
        write_client_conf(conf, bin_dir, d, lib, java, addresses, extra=merged(*client_extra),
                          java_options=krb.java_options() if krb else ())
        nodes = _nodes(addresses, nodemanagers, scheduling)

        rm_web = f"http://{addresses['rm_webapp_address']}"
        webhdfs = f"http://{addresses['namenode_http']}"
        if krb:
            # The JVM only says where it listens once HDFS is active and the NodeManagers run (it
            # waits for both), and the REST APIs will not answer without a ticket; what is left
            # to see is that the KDC logs the user in and the web servers ask for SPNEGO.
            kinit(krb.krb5_conf, krb.ccache, krb.principal, krb.keytab)

        def ready() -> bool:
            if krb:
                return (_asks_for_spnego(f"{rm_web}/ws/v1/cluster/info")
                        and _asks_for_spnego(f"{webhdfs}/webhdfs/v1/?op=GETFILESTATUS"))
            labels = {n["node_id"]: n["label"] for n in nodes if n["label"]}
            return _yarn_ready(rm_web, nodemanagers, labels) and _hdfs_ready(webhdfs)

        while not ready():
            if proc.poll() is not None:
                raise fail(f"the mini cluster's JVM exited with status {proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise fail(f"YARN or WebHDFS did not answer within {timeout:.0f} s (ResourceManager {rm_web}, "
                           f"WebHDFS {webhdfs})")
            time.sleep(0.5)
    except BaseException:
        # Interrupted or failed: a half-started cluster must not linger in the background.
        _terminate(ps, grace=15)
        raise

    info = {
        "dir": str(d),
        "rm_web": rm_web,
        "webhdfs": webhdfs,
        "fs_default": addresses["fs_default"],
        "hadoop_conf_dir": str(conf),
        "rm_address": addresses["rm_address"],
        "rm_scheduler_address": addresses["rm_scheduler_address"],
        "pid": proc.pid,
        "bin_dir": str(bin_dir),
        "java_home": str(java.home),
        "hadoop_lib": str(lib),
        "hadoop_version": HADOOP_VERSION,
        "log": str(logs / "minicluster.log"),
        "nodemanagers": nodemanagers,
        "gpus_per_nm": gpus_per_nm,
        "gpus_stand_in": gpus_per_nm > real_gpus,
        "nm_memory_mb": nm_memory_mb,
        "nm_vcores": nm_vcores,
        "secure": krb is not None,
        "isolated": isolated, **({"hidden": [str(p) for p in hidden]} if isolated else {}),
        **scheduling.describe(),
        "nodes": nodes,
        "datanodes": [{"index": i, "xfer_address": addresses[f"datanode.{i}.xfer_address"],
                       "http_address": addresses[f"datanode.{i}.http_address"], "stopped": False}
                      for i in range(datanodes)],
        **({"realm": addresses["realm"], "kdc": addresses["kdc"], "krb5_conf": str(krb.krb5_conf),
            "principal": krb.principal, "keytab": str(krb.keytab), "ccache": str(krb.ccache),
            "other_users": {n: {"principal": f"{n}@{addresses['realm']}", "keytab": str(krb.user_keytab(n))}
                            for n in OTHER_USERS if n != krb.user}} if krb else {}),
        "started_in_s": round(time.monotonic() - t0, 1),
    }
    write_file(d / "cluster.json", json.dumps(info, indent=1) + "\n")
    progress(f"ready in {info['started_in_s']} s: ResourceManager {rm_web}, WebHDFS {webhdfs}")
    return info


def _hdfs_settings(datanodes: int, server: bool) -> Settings:
    """HDFS's part for ``datanodes`` DataNodes: how many the launcher starts (the daemons' side),
    and a block on each of them, up to three (what clients write with)."""
    props: dict[str, object] = {"dfs.replication": min(datanodes, 3)}
    if server:
        props["tony.minicluster.datanodes"] = datanodes
    return {"hdfs-site.xml": props}


def _nodes(addresses: dict[str, str], nodemanagers: int, scheduling: Scheduling) -> list[dict]:
    """The NodeManagers by index: their node ids (what the ResourceManager and containers' reports
    name a node by), web addresses and labels; ``stopped`` turns true when one is stopped."""
    label_of = {i: label for label, indexes in scheduling.node_labels.items() for i in indexes}
    return [{"index": i, "node_id": addresses[f"nodemanager.{i}.node_id"],
             "http_address": addresses[f"nodemanager.{i}.http_address"], "label": label_of.get(i, ""),
             "stopped": False} for i in range(nodemanagers)]


def stop(directory: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> bool:
    """Stops the mini cluster in ``directory``; returns False if none was running. Leaves the logs
    and data for a look afterwards; the next :func:`start` clears them."""
    d = Path(directory or _default_dir()).expanduser().resolve()
    proc = _running(d)
    if proc is not None:
        _terminate(proc, grace=timeout)
    with contextlib.suppress(FileNotFoundError):
        (d / "cluster.json").unlink()
    with contextlib.suppress(FileNotFoundError):
        (d / "run" / "pid.json").unlink()
    return proc is not None


def status(directory: str | os.PathLike[str] | None = None) -> dict | None:
    """The running cluster's ``cluster.json``, or None when none runs in ``directory``."""
    d = Path(directory or _default_dir()).expanduser().resolve()
    if _running(d) is None:
        return None
    try:
        return json.loads((d / "cluster.json").read_text())
    except (OSError, ValueError):
        return None  # still starting


def client_env(info: dict, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a Hadoop client (skein, the YARN backend) needs for the cluster ``info``:
    HADOOP_CONF_DIR, JAVA_HOME, and PATH starting with the cluster's ``bin``; for a secure cluster
    also KRB5_CONFIG and KRB5CCNAME, its krb5.conf and ticket cache (see :func:`login`)."""
    env = dict(os.environ if base is None else base)
    env["HADOOP_CONF_DIR"] = info["hadoop_conf_dir"]
    env["JAVA_HOME"] = info["java_home"]
    env["PATH"] = os.pathsep.join([info["bin_dir"], env.get("PATH", "")])
    if info.get("secure"):
        env["KRB5_CONFIG"] = info["krb5_conf"]
        env["KRB5CCNAME"] = info["ccache"]
    return env


def login(info: dict) -> None:
    """Logs the submitting user of the secure cluster ``info`` in to the cluster's ticket cache
    (``KRB5CCNAME`` of :func:`client_env`), from its keytab; tickets last a day, so a client that
    outlives one logs in again."""
    if not info.get("secure"):
        raise MiniClusterError("this mini cluster is not secure: its clients need no login")
    kinit(info["krb5_conf"], info["ccache"], info["principal"], info["keytab"])
