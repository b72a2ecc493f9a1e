"""A real Hadoop 3.5.0 cluster on this machine: YARN (a ResourceManager and NodeManagers) and HDFS
(a NameNode with WebHDFS and a DataNode), all in one background JVM.

It exists so that the YARN backend and WebHDFS storage can be exercised against the real daemons,
in tests and by hand, without installing Hadoop. The jars come from Maven Central (see
``minicluster/pom.xml``) into a cache shared by every cluster; a small launcher class is compiled
against them on first use.

A cluster lives in one directory::

    cluster.json        where everything listens (written last: its presence means "ready")
    conf/               a HADOOP_CONF_DIR for clients
    bin/yarn, bin/hadoop   enough of Hadoop's commands for clients (``yarn classpath --glob``, ...)
    server-conf/        the daemons' settings, first on their classpath
    logs/minicluster.log   the JVM's output
    run/                the pid and the addresses the daemons bound
    data/, hdfs/        YARN's and HDFS's working directories

Every port is a free one unless a fixed one is asked for, so clusters started side by side (by
parallel test runs, say) do not collide.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import getpass
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator
from xml.sax.saxutils import escape

import psutil
import requests

__all__ = [
    "HADOOP_VERSION", "MiniClusterError", "start", "stop", "status", "client_env", "hadoop_lib_dir",
    "add_parser",
]

HADOOP_VERSION = "3.5.0"

_SOURCES = Path(__file__).with_name("minicluster")
_POM = _SOURCES / "pom.xml"
_MAIN_SOURCE = _SOURCES / "src" / "main" / "java" / "tonyworkflow" / "minicluster" / "MiniClusterMain.java"
_MAIN_CLASS = "tonyworkflow.minicluster.MiniClusterMain"
_JARS_STAMP = ".tony-pom-sha256"

# Hadoop's own list for running on Java 17 (hadoop-project's extraJavaTestArgs): its RPC, web and
# security code reflects into these packages.
JAVA_MODULE_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in (
        "java.io", "java.lang", "java.lang.reflect", "java.math", "java.net", "java.text", "java.util",
        "java.util.concurrent", "java.util.zip", "sun.security.util", "sun.security.x509")),
)

_JVM_OPTIONS = (
    # Four daemons share this heap; a test cluster stays far below it, and a fixed cap keeps a CI
    # machine from handing the JVM a quarter of its memory.
    "-Xmx1g",
    # A test cluster lives for minutes: with the quick compiler alone it starts in about 8 s
    # instead of 11 on two cores, and the serial collector spares small machines a thread per core.
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
)

_DEFAULTS = {"nodemanagers": 1, "gpus_per_nm": 4, "nm_memory_mb": 16384, "nm_vcores": 16}

Progress = Callable[[str], None]


class MiniClusterError(RuntimeError):
    """A cluster could not be started or stopped; the message says why and what to do."""


def _quiet(_: str) -> None:
    pass


# --------------------------------------------------------------------------------------------
# Java, Maven and the jar cache

@dataclass(frozen=True)
class Java:
    home: Path
    java: Path
    javac: Path | None
    version: int


def find_java() -> Java:
    """The JDK to run Hadoop with: ``$JAVA_HOME``, else the ``java`` on PATH. Hadoop 3.5 needs 17+."""
    home_env = os.environ.get("JAVA_HOME")
    if home_env:
        java = Path(home_env) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise MiniClusterError(f"JAVA_HOME is {home_env}, but {java} is not an executable; "
                                   "point JAVA_HOME at a JDK 17 or newer")
    else:
        found = shutil.which("java")
        if not found:
            raise MiniClusterError("no Java found: install a JDK 17 or newer, or set JAVA_HOME")
        java = Path(os.path.realpath(found))
    home = java.parent.parent
    try:
        out = subprocess.run([str(java), "-XshowSettings:properties", "-version"], capture_output=True,
                             text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MiniClusterError(f"cannot run {java}: {e}") from None
    m = re.search(r"java\.specification\.version = (\d+)(?:\.(\d+))?", out)
    if not m:
        raise MiniClusterError(f"cannot tell which Java {java} is; its output was:\n{out.strip()[-1000:]}")
    version = int(m.group(2)) if m.group(1) == "1" else int(m.group(1))
    if version < 17:
        raise MiniClusterError(f"Hadoop {HADOOP_VERSION} needs Java 17 or newer, but {java} is Java {version}; "
                               "set JAVA_HOME to a newer JDK")
    javac = home / "bin" / "javac"
    return Java(home=home, java=java, javac=javac if os.access(javac, os.X_OK) else None, version=version)


def hadoop_lib_dir() -> Path:
    """Where the Hadoop jars are cached: ``$TONY_HADOOP_LIB``, else
    ``~/.cache/tony-workflow/hadoop-3.5.0`` (under ``$XDG_CACHE_HOME`` when that is set)."""
    if os.environ.get("TONY_HADOOP_LIB"):
        return Path(os.environ["TONY_HADOOP_LIB"]).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return (cache / "tony-workflow" / f"hadoop-{HADOOP_VERSION}").resolve()


def _sha256(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """Serialises filling the shared cache between clusters started at the same time."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_hadoop_jars(lib: Path | None = None, *, progress: Progress = _quiet) -> Path:
    """Fills ``lib`` with the jars the pom names (Maven's ``dependency:copy-dependencies``), once:
    a stamp with the pom's hash marks a complete copy, so an interrupted download or a changed pom
    is fetched again."""
    lib = lib or hadoop_lib_dir()
    stamp = lib / _JARS_STAMP
    want = _sha256(_POM)
    if stamp.is_file() and stamp.read_text().strip() == want:
        return lib
    with _locked(lib / ".lock"):
        if stamp.is_file() and stamp.read_text().strip() == want:
            return lib
        mvn = shutil.which("mvn")
        if not mvn:
            raise MiniClusterError(
                f"Maven ('mvn') is needed once to fetch the Hadoop {HADOOP_VERSION} jars into {lib}; install it "
                "(it must reach Maven Central), or set TONY_HADOOP_LIB to a cache filled on another machine")
        for old in lib.glob("*.jar"):
            old.unlink()
        build = lib / ".build"
        build.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_POM, build / "pom.xml")
        progress(f"fetching the Hadoop {HADOOP_VERSION} jars with Maven into {lib} (once)")
        cmd = [mvn, "-q", "-B", "-f", str(build / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=build)
        except subprocess.TimeoutExpired:
            raise MiniClusterError("Maven did not finish fetching the Hadoop jars within 30 minutes") from None
        if done.returncode != 0 or not list(lib.glob(f"hadoop-minicluster-{HADOOP_VERSION}*.jar")):
            raise MiniClusterError(
                f"Maven could not fetch the Hadoop {HADOOP_VERSION} jars (exit {done.returncode}); is Maven Central "
                f"reachable?\n$ {shlex.join(cmd)}\n{_tail(done.stdout + done.stderr)}")
        stamp.write_text(want + "\n")
    return lib


def ensure_launcher_classes(lib: Path, java: Java, *, progress: Progress = _quiet) -> Path:
    """Compiles the launcher class next to the jars, once per version of its source."""
    classes = lib / "classes"
    stamp = classes / ".source-sha256"
    want = _sha256(_MAIN_SOURCE)
    if stamp.is_file() and stamp.read_text().strip() == want:
        return classes
    with _locked(lib / ".lock"):
        if stamp.is_file() and stamp.read_text().strip() == want:
            return classes
        if java.javac is None:
            raise MiniClusterError(f"{java.home} is a JRE without javac; the mini cluster needs a JDK 17 or newer "
                                   "(set JAVA_HOME to one)")
        progress("compiling the mini cluster launcher")
        part = lib / "classes.part"
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        done = subprocess.run([str(java.javac), "-nowarn", "-XDignore.symbol.file", "-d", str(part),
                               "-cp", str(lib / "*"), str(_MAIN_SOURCE)],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise MiniClusterError(f"javac could not compile {_MAIN_SOURCE.name} against {lib}:\n"
                                   f"{_tail(done.stdout + done.stderr)}")
        (part / ".source-sha256").write_text(want + "\n")
        shutil.rmtree(classes, ignore_errors=True)
        os.replace(part, classes)
    return classes


# --------------------------------------------------------------------------------------------
# Configuration files

def _site_xml(props: dict[str, object]) -> str:
    lines = ['<?xml version="1.0"?>', "<!-- Written by `tony minicluster start`. -->", "<configuration>"]
    for k, v in props.items():
        value = str(v).lower() if isinstance(v, bool) else str(v)
        lines.append(f"  <property><name>{escape(k)}</name><value>{escape(value)}</value></property>")
    return "\n".join(lines + ["</configuration>", ""])


def _write(path: Path, text: str, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    if mode is not None:
        part.chmod(mode)
    os.replace(part, path)


_RESOURCE_TYPES = {"yarn.resource-types": "yarn.io/gpu"}

_CAPACITY_SCHEDULER = {
    # GPUs only count when the scheduler looks past memory; the default calculator sees memory alone.
    "yarn.scheduler.capacity.resource-calculator": "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator",
    "yarn.scheduler.capacity.root.queues": "default",
    "yarn.scheduler.capacity.root.default.capacity": 100,
    "yarn.scheduler.capacity.root.default.maximum-capacity": 100,
    "yarn.scheduler.capacity.root.default.state": "RUNNING",
    "yarn.scheduler.capacity.root.default.acl_submit_applications": "*",
    "yarn.scheduler.capacity.root.default.acl_administer_queue": "*",
    # Tests run several jobs at once, each with its own ApplicationMaster.
    "yarn.scheduler.capacity.maximum-am-resource-percent": 0.5,
    # No request names a host, so waiting for locality would only delay every allocation.
    "yarn.scheduler.capacity.node-locality-delay": -1,
}


def _server_conf(d: Path, lib: Path, *, gpus: int, memory_mb: int, vcores: int, rm_port: int,
                 rm_web_port: int) -> dict[str, dict[str, object]]:
    tmp = d / "data" / "tmp"
    core = {"hadoop.tmp.dir": tmp}
    hdfs = {
        "dfs.replication": 1,
        "dfs.webhdfs.enabled": True,
        # A scratch cluster: any client user may write anywhere (containers, pyhdfs, the skein driver).
        "dfs.permissions.enabled": False,
        # The NameNode enters safe mode when its disk has under 100 MB free, as CI disks may.
        "dfs.namenode.resource.du.reserved": 0,
    }
    yarn = {
        # "Fixed" only means MiniYARNCluster keeps these addresses instead of forcing port 0 on all
        # of them; port 0 still picks a free port. Binding to localhost keeps the cluster private.
        "yarn.minicluster.fixed.ports": True,
        "yarn.resourcemanager.hostname": "localhost",
        "yarn.resourcemanager.address": f"localhost:{rm_port}",
        "yarn.resourcemanager.scheduler.address": "localhost:0",
        "yarn.resourcemanager.resource-tracker.address": "localhost:0",
        "yarn.resourcemanager.admin.address": "localhost:0",
        "yarn.resourcemanager.webapp.address": f"localhost:{rm_web_port}",
        # MiniYARNCluster sizes each NodeManager from this key, not from the usual one.
        "yarn.minicluster.yarn.nodemanager.resource.memory-mb": memory_mb,
        "yarn.nodemanager.resource.memory-mb": memory_mb,
        "yarn.nodemanager.resource.cpu-vcores": vcores,
        # Declared as a countable resource only: no GPU plugin, so no nvidia-smi is needed.
        "yarn.nodemanager.resource-type.yarn.io/gpu": gpus,
        "yarn.scheduler.minimum-allocation-mb": 128,
        "yarn.scheduler.maximum-allocation-mb": memory_mb,
        "yarn.scheduler.maximum-allocation-vcores": vcores,
        # Python processes reserve far more virtual memory than they use, and the machine's real
        # memory is not what the NodeManager advertises: neither check means anything here.
        "yarn.nodemanager.vmem-check-enabled": False,
        "yarn.nodemanager.pmem-check-enabled": False,
        # A NodeManager whose disk is over 90% full turns UNHEALTHY and gets no containers.
        "yarn.nodemanager.disk-health-checker.enable": False,
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": 100.0,
        "yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb": 0,
        # Keeps finished containers' directories for a while, to read what went wrong.
        "yarn.nodemanager.delete.debug-delay-sec": 600,
        # Containers' logs go to HDFS when an application ends, where `yarn logs` reads them.
        "yarn.log-aggregation-enable": True,
        "yarn.nodemanager.remote-app-log-dir": "/tmp/logs",
        "yarn.application.classpath": _application_classpath(d, lib),
    }
    return {"core-site.xml": core, "hdfs-site.xml": hdfs, "yarn-site.xml": yarn,
            "resource-types.xml": _RESOURCE_TYPES, "capacity-scheduler.xml": _CAPACITY_SCHEDULER}


def _application_classpath(d: Path, lib: Path) -> str:
    # What containers (an ApplicationMaster) get instead of $HADOOP_*_HOME/share/...: there is no
    # Hadoop installation, only the cache, on this very machine.
    return f"{d / 'conf'},{lib / '*'}"


_LOG4J = """\
# The mini cluster's JVM logs to stdout, which the launcher sends to logs/minicluster.log.
log4j.rootLogger=INFO,stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{2} - %m%n
# One line per HDFS call or block would bury everything else.
log4j.logger.FSNamesystem.audit=WARN
log4j.logger.BlockStateChange=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.fsdataset.impl=WARN
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
"""

_CLIENT_LOG4J = """\
# Clients of the mini cluster (the yarn/hadoop commands, drivers) print warnings only.
log4j.rootLogger=WARN,stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} %-5p %c{2} - %m%n
# Hadoop runs without its native library here, as it can; saying so on every command is noise.
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""


def _client_conf(d: Path, lib: Path, addresses: dict[str, str]) -> dict[str, dict[str, object]]:
    rm_host = addresses["rm_address"].rsplit(":", 1)[0]
    core = {"fs.defaultFS": addresses["fs_default"]}
    hdfs = {
        "dfs.namenode.rpc-address": addresses["fs_default"].split("://", 1)[1],
        "dfs.namenode.http-address": addresses["namenode_http"],
        "dfs.webhdfs.enabled": True,
        "dfs.replication": 1,
    }
    yarn = {
        "yarn.resourcemanager.hostname": rm_host,
        "yarn.resourcemanager.address": addresses["rm_address"],
        "yarn.resourcemanager.scheduler.address": addresses["rm_scheduler_address"],
        "yarn.resourcemanager.resource-tracker.address": addresses["rm_resource_tracker_address"],
        "yarn.resourcemanager.admin.address": addresses["rm_admin_address"],
        "yarn.resourcemanager.webapp.address": addresses["rm_webapp_address"],
        "yarn.application.classpath": _application_classpath(d, lib),
        "yarn.log-aggregation-enable": True,
        "yarn.nodemanager.remote-app-log-dir": "/tmp/logs",
    }
    return {"core-site.xml": core, "hdfs-site.xml": hdfs, "yarn-site.xml": yarn,
            "resource-types.xml": _RESOURCE_TYPES, "capacity-scheduler.xml": _CAPACITY_SCHEDULER}


# Hadoop's `yarn`/`hadoop` subcommands that are plain Java mains, and whether the subcommand's
# own name is passed on (ApplicationCLI serves several and needs to know which).
_COMMANDS = {
    "yarn": {"application": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
             "applicationattempt": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
             "container": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
             "node": ("org.apache.hadoop.yarn.client.cli.NodeCLI", False),
             "queue": ("org.apache.hadoop.yarn.client.cli.QueueCLI", False),
             "logs": ("org.apache.hadoop.yarn.client.cli.LogsCLI", False),
             "version": ("org.apache.hadoop.util.VersionInfo", False)},
    "hadoop": {"fs": ("org.apache.hadoop.fs.FsShell", False),
               "version": ("org.apache.hadoop.util.VersionInfo", False)},
}


def _command_script(name: str, conf: Path, lib: Path, java: Java) -> str:
    q = shlex.quote
    java_cmd = " ".join([q(str(java.java)), *map(q, JAVA_MODULE_OPTIONS),
                         q(f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}")])
    cases = [f'  {sub}) {"" if keep else "shift; "}run_java {cls} "$@" ;;'
             for sub, (cls, keep) in _COMMANDS[name].items()]
    usage = " | ".join(["classpath [--glob]", *_COMMANDS[name]])
    return f"""#!/bin/sh
# `{name}` for clients of the tony mini cluster: the Hadoop jars are a cache, not an installation,
# so this stands in for the real command. Written by `tony minicluster start`.
CONF={q(str(conf))}
LIB={q(str(lib))}
CP="$CONF:$LIB/*"
run_java() {{
  main=$1; shift
  exec {java_cmd} -cp "$CP" "$main" "$@"
}}
case "$1" in
  classpath)
    if [ "$2" = "--glob" ]; then
      # Hadoop's --glob expands the wildcards into the jars themselves.
      printf '%s' "$CONF"
      for jar in "$LIB"/*.jar; do printf ':%s' "$jar"; done
      printf '\\n'
    else
      printf '%s\\n' "$CP"
    fi ;;
{chr(10).join(cases)}
  *) echo "usage: {name} {usage}" >&2; exit 1 ;;
esac
"""


# --------------------------------------------------------------------------------------------
# The cluster's process

def _default_dir() -> Path:
    return Path(os.environ.get("TONY_HOME") or Path.home() / ".tony").expanduser() / "minicluster"


def _process(d: Path) -> psutil.Process | None:
    """The cluster's JVM if it still runs. The pid file also holds the start time, so a recycled
    pid is never mistaken for the cluster."""
    try:
        rec = json.loads((d / "run" / "pid.json").read_text())
        proc = psutil.Process(int(rec["pid"]))
        if abs(proc.create_time() - float(rec["create_time"])) > 1.0:
            return None
        return proc if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE else None
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None


_OWNED = ("cluster.json", "conf", "server-conf", "bin", "run", "data", "hdfs", "logs")


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
    return _tail(text, lines)


def _terminate(proc: psutil.Process, grace: float) -> None:
    """SIGTERM lets the JVM stop its daemons in order (and the NodeManager its containers); what is
    left after ``grace`` is killed, containers included."""
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


def _yarn_ready(rm_web: str, nodemanagers: int) -> bool:
    info = _get_json(f"{rm_web}/ws/v1/cluster/info")
    if not info or info.get("clusterInfo", {}).get("state") != "STARTED":
        return False
    nodes = ((_get_json(f"{rm_web}/ws/v1/cluster/nodes") or {}).get("nodes") or {}).get("node") or []
    return sum(1 for n in nodes if n.get("state") == "RUNNING") >= nodemanagers


def _hdfs_ready(webhdfs: str) -> bool:
    st = _get_json(f"{webhdfs}/webhdfs/v1/?op=GETFILESTATUS&user.name={_user()}")
    return bool(st and st.get("FileStatus", {}).get("type") == "DIRECTORY")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, as in some containers
        return "tony"


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


def start(directory: str | os.PathLike[str] | None = None, *, nodemanagers: int = 1, gpus_per_nm: int = 4,
          nm_memory_mb: int = 16384, nm_vcores: int = 16, timeout: float = 180.0, rm_port: int = 0,
          rm_web_port: int = 0, namenode_port: int = 0, webhdfs_port: int = 0,
          progress: Progress = _quiet) -> dict:
    """Starts a mini cluster in ``directory`` (default ``$TONY_HOME/minicluster``) and returns its
    ``cluster.json``, once YARN has ``nodemanagers`` RUNNING NodeManagers and WebHDFS answers.

    Each NodeManager advertises ``gpus_per_nm`` ``yarn.io/gpu`` (no GPU need exist),
    ``nm_memory_mb`` MiB and ``nm_vcores`` vcores (virtual: not checked against the machine's
    cores). ``timeout`` bounds the wait for the daemons, not the one-time jar download. The
    ResourceManager's RPC and web ports and the NameNode's RPC and HTTP (WebHDFS) ports are free
    ones unless given. Raises :class:`MiniClusterError` when a cluster already runs there or it
    cannot start.
    """
    for name, value, least in (("nodemanagers", nodemanagers, 1), ("gpus_per_nm", gpus_per_nm, 0),
                               ("nm_memory_mb", nm_memory_mb, 1024), ("nm_vcores", nm_vcores, 1),
                               ("rm_port", rm_port, 0), ("rm_web_port", rm_web_port, 0),
                               ("namenode_port", namenode_port, 0), ("webhdfs_port", webhdfs_port, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise MiniClusterError(f"{name} must be an integer >= {least}, got {value!r}")
    if timeout <= 0:
        raise MiniClusterError(f"timeout must be positive, got {timeout!r}")
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
    running = _process(d)
    if running:
        raise MiniClusterError(f"a mini cluster already runs in {d} (pid {running.pid}); "
                               f"stop it first with: tony minicluster stop --dir {shlex.quote(str(d))}")
    _check_ports(ports)
    _clear(d)

    java = find_java()
    lib = ensure_hadoop_jars(progress=progress)
    classes = ensure_launcher_classes(lib, java, progress=progress)

    server_conf, conf, bin_dir, run, logs = (d / "server-conf", d / "conf", d / "bin", d / "run", d / "logs")
    for name, props in _server_conf(d, lib, gpus=gpus_per_nm, memory_mb=nm_memory_mb, vcores=nm_vcores,
                                    rm_port=rm_port, rm_web_port=rm_web_port).items():
        _write(server_conf / name, _site_xml(props))
    _write(server_conf / "log4j.properties", _LOG4J)
    for p in (run, logs, d / "data"):
        p.mkdir(parents=True, exist_ok=True)

    cmd = [str(java.java), *_JVM_OPTIONS, *JAVA_MODULE_OPTIONS,
           "-Djava.net.preferIPv4Stack=true",
           f"-Dlog4j.configuration=file:{server_conf / 'log4j.properties'}",
           # MiniYARNCluster puts its NodeManagers' work directories under this.
           f"-Dtest.build.data={d / 'data'}",
           "-cp", os.pathsep.join([str(server_conf), str(classes), str(lib / "*")]),
           _MAIN_CLASS, str(d), str(nodemanagers), str(namenode_port), str(webhdfs_port)]
    # The daemons read their settings from the classpath (server-conf) only. JAVA_HOME and
    # HADOOP_CONF_DIR are for the containers, which the NodeManager gives its own values of these,
    # as on a real cluster.
    env = {**os.environ, "JAVA_HOME": str(java.home), "HADOOP_CONF_DIR": str(conf)}
    for var in ("YARN_CONF_DIR", "CLASSPATH", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        env.pop(var, None)
    progress(f"starting Hadoop {HADOOP_VERSION} (YARN + HDFS) in {d}")
    t0 = time.monotonic()
    with open(logs / "minicluster.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=d / "data", env=env, start_new_session=True)
    ps = psutil.Process(proc.pid)
    _write(run / "pid.json", json.dumps({"pid": proc.pid, "create_time": ps.create_time()}) + "\n")

    def fail(why: str) -> MiniClusterError:
        _terminate(ps, grace=15)
        proc.poll()
        tail = _log_tail(d)
        if "java.net.BindException" in tail:
            why += " because a port was taken (another process bound it after the check)"
        return MiniClusterError(f"{why}\n--- {logs / 'minicluster.log'} ---\n{tail}")

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

        for name, props in _client_conf(d, lib, addresses).items():
            _write(conf / name, _site_xml(props))
        _write(conf / "log4j.properties", _CLIENT_LOG4J)
        for name in _COMMANDS:
            _write(bin_dir / name, _command_script(name, conf, lib, java), mode=0o755)

        rm_web = f"http://{addresses['rm_webapp_address']}"
        webhdfs = f"http://{addresses['namenode_http']}"
        while not (_yarn_ready(rm_web, nodemanagers) and _hdfs_ready(webhdfs)):
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
        "nm_memory_mb": nm_memory_mb,
        "nm_vcores": nm_vcores,
        "started_in_s": round(time.monotonic() - t0, 1),
    }
    _write(d / "cluster.json", json.dumps(info, indent=1) + "\n")
    progress(f"ready in {info['started_in_s']} s: ResourceManager {rm_web}, WebHDFS {webhdfs}")
    return info


def stop(directory: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> bool:
    """Stops the mini cluster in ``directory``; returns False if none was running. Leaves the logs
    and data for a look afterwards; the next :func:`start` clears them."""
    d = Path(directory or _default_dir()).expanduser().resolve()
    proc = _process(d)
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
    if _process(d) is None:
        return None
    try:
        return json.loads((d / "cluster.json").read_text())
    except (OSError, ValueError):
        return None  # still starting


def client_env(info: dict, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a Hadoop client (skein, the YARN backend) needs for the cluster ``info``:
    HADOOP_CONF_DIR, JAVA_HOME, and PATH starting with the cluster's ``bin``."""
    env = dict(os.environ if base is None else base)
    env["HADOOP_CONF_DIR"] = info["hadoop_conf_dir"]
    env["JAVA_HOME"] = info["java_home"]
    env["PATH"] = os.pathsep.join([info["bin_dir"], env.get("PATH", "")])
    return env


# --------------------------------------------------------------------------------------------
# The `tony minicluster` command

def _cmd_start(args: argparse.Namespace) -> int:
    info = start(args.dir, nodemanagers=args.nodemanagers, gpus_per_nm=args.gpus, nm_memory_mb=args.memory_mb,
                 nm_vcores=args.vcores, timeout=args.timeout, rm_port=args.rm_port, rm_web_port=args.rm_web_port,
                 namenode_port=args.namenode_port, webhdfs_port=args.webhdfs_port,
                 progress=lambda msg: print(f"tony minicluster: {msg}", file=sys.stderr, flush=True))
    print(json.dumps(info, indent=1))
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    was_running = stop(args.dir, timeout=args.timeout)
    print("stopped" if was_running else "no mini cluster was running", file=sys.stderr)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    info = status(args.dir)
    if info is None:
        print("no mini cluster is running", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=1))
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    info = status(args.dir)
    if info is None:
        print("no mini cluster is running", file=sys.stderr)
        return 1
    env = client_env(info)
    for var in ("HADOOP_CONF_DIR", "JAVA_HOME", "PATH"):
        print(f"export {var}={shlex.quote(env[var])}")
    return 0


def _run(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except MiniClusterError as e:
            print(f"tony minicluster: {e}", file=sys.stderr)
            return 2
    return run


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Adds ``tony minicluster start|stop|status|env`` to the ``tony`` command."""
    mc = subparsers.add_parser("minicluster", help=f"run a local Hadoop {HADOOP_VERSION} cluster (YARN + HDFS)",
                               description=f"A real Hadoop {HADOOP_VERSION} YARN + HDFS cluster in one background "
                                           "JVM, for tests and trials of the yarn backend.")
    sub = mc.add_subparsers(dest="minicluster_command", required=True)

    def with_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--dir", help="the cluster's directory (default $TONY_HOME/minicluster)")
        return p

    s = with_dir(sub.add_parser("start", help="start a cluster and print its cluster.json"))
    s.add_argument("--nodemanagers", type=int, default=_DEFAULTS["nodemanagers"])
    s.add_argument("--gpus", type=int, default=_DEFAULTS["gpus_per_nm"], help="yarn.io/gpu per NodeManager")
    s.add_argument("--memory-mb", type=int, default=_DEFAULTS["nm_memory_mb"], help="memory per NodeManager")
    s.add_argument("--vcores", type=int, default=_DEFAULTS["nm_vcores"], help="vcores per NodeManager")
    s.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the daemons")
    for flag, what in (("--rm-port", "ResourceManager RPC"), ("--rm-web-port", "ResourceManager web/REST"),
                       ("--namenode-port", "NameNode RPC"), ("--webhdfs-port", "NameNode HTTP (WebHDFS)")):
        s.add_argument(flag, type=int, default=0, metavar="PORT", help=f"{what} port (default: any free port)")
    s.set_defaults(fn=_run(_cmd_start))

    t = with_dir(sub.add_parser("stop", help="stop the cluster"))
    t.add_argument("--timeout", type=float, default=60.0, help="seconds before the JVM is killed")
    t.set_defaults(fn=_run(_cmd_stop))

    with_dir(sub.add_parser("status", help="print cluster.json if the cluster runs")).set_defaults(
        fn=_run(_cmd_status))
    with_dir(sub.add_parser("env", help="print shell exports for Hadoop clients (eval them)")).set_defaults(
        fn=_run(_cmd_env))
    return mc
