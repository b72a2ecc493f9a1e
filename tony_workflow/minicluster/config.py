"""The files a cluster's directory holds for Hadoop: the daemons' site XML, the clients' site XML,
log4j settings, and the ``yarn``/``hadoop`` commands for clients.

There are two configurations because the two sides know different things. The daemons' one
(``server-conf/``, first on the JVM's classpath) is written before the JVM starts and asks for
ports, 0 meaning any free one; the clients' one (``conf/``, a HADOOP_CONF_DIR) can only be written
once the daemons have said which ports they bound. Both are plain data built here and written by
:func:`write_file`, which replaces a file whole, so a reader never sees half of one. A secure
cluster's settings (:mod:`.secure`) come in as ``extra`` properties laid over these.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from ..hadoop import site_xml
from .build import JAVA_MODULE_OPTIONS, Java

__all__ = ["Settings", "merged", "write_client_conf", "write_file", "write_server_conf"]


def _site_xml(props: dict[str, object]) -> str:
    return site_xml(props, comment="Written by `tony minicluster start`.")


Settings = Mapping[str, Mapping[str, object]]


def merged(*layers: Settings) -> dict[str, dict[str, object]]:
    """The ``layers`` of settings laid one over the other, file by file, the last on top."""
    out: dict[str, dict[str, object]] = {}
    for layer in layers:
        for name, props in layer.items():
            out.setdefault(name, {}).update(props)
    return out


def _with(base: dict[str, dict[str, object]], extra: Settings | None) -> dict[str, dict[str, object]]:
    """``base`` with ``extra``'s properties set on top, file by file."""
    return {name: {**props, **(extra or {}).get(name, {})} for name, props in base.items()}


def write_file(path: Path, text: str, mode: int | None = None) -> None:
    """Writes ``path`` under a temporary name and renames it into place."""
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
    # The scheduler places containers from a thread of its own, which looks every 5 ms by default:
    # two thirds of an idle cluster's CPU, on a machine whose tests share two cores. Every 50 ms
    # adds 25 ms on average to an allocation that waits a second for a node's heartbeat anyway.
    "yarn.scheduler.capacity.schedule-asynchronously.scheduling-interval-ms": 50,
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
        # The NameNode's thread that deletes removed files' blocks looks for work every 10 ms,
        # idle or not (the rest of an idle cluster's CPU); a tenth as often is plenty here.
        "dfs.namenode.block.deletion.unlock.interval.ms": 100,
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
        # Python processes reserve far more virtual memory than they use: that check means nothing
        # here. The physical one is off unless a cluster is started with memory_limits.
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


def _command_script(name: str, conf: Path, lib: Path, java: Java, java_options: tuple[str, ...] = ()) -> str:
    q = shlex.quote
    java_cmd = " ".join([q(str(java.java)), *map(q, JAVA_MODULE_OPTIONS), *map(q, java_options),
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


def write_server_conf(server_conf: Path, d: Path, lib: Path, *, gpus: int, memory_mb: int, vcores: int,
                      rm_port: int, rm_web_port: int, extra: Settings | None = None) -> None:
    """Writes the daemons' settings for the cluster in ``d`` into ``server_conf``, with ``extra``
    (site file name -> properties) on top."""
    for name, props in _with(_server_conf(d, lib, gpus=gpus, memory_mb=memory_mb, vcores=vcores,
                                          rm_port=rm_port, rm_web_port=rm_web_port), extra).items():
        write_file(server_conf / name, _site_xml(props))
    write_file(server_conf / "log4j.properties", _LOG4J)


def write_client_conf(conf: Path, bin_dir: Path, d: Path, lib: Path, java: Java, addresses: dict[str, str], *,
                      extra: Settings | None = None, java_options: tuple[str, ...] = ()) -> None:
    """Writes the clients' HADOOP_CONF_DIR ``conf``, pointing at the ``addresses`` the daemons
    bound, with ``extra`` on top, and the ``yarn`` and ``hadoop`` commands, whose JVMs get
    ``java_options``, into ``bin_dir``."""
    for name, props in _with(_client_conf(d, lib, addresses), extra).items():
        write_file(conf / name, _site_xml(props))
    write_file(conf / "log4j.properties", _CLIENT_LOG4J)
    for name in _COMMANDS:
        write_file(bin_dir / name, _command_script(name, conf, lib, java, java_options), mode=0o755)
