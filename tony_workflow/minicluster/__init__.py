"""A real Hadoop 3.5.0 cluster on this machine: YARN (a ResourceManager and NodeManagers) and HDFS
(a NameNode with WebHDFS and a DataNode), all in one background JVM.

It exists so that the YARN backend and WebHDFS storage can be exercised against the real daemons,
in tests and by hand, without installing Hadoop. The jars come from Maven Central (see
``pom.xml`` here) into a cache shared by every cluster; a small launcher class
(``src/main/java/...``) is compiled against them on first use.

The parts, each its own module: :mod:`.build` (Java, the jars, the launcher), :mod:`.config` (the
files Hadoop and its clients read), :mod:`.secure` (a KDC and Kerberos for every daemon, as on a
production cluster), :mod:`.scheduling` (queues with preemption, node labels, priorities),
:mod:`.cluster` (starting, watching and stopping the JVM), :mod:`.nodes` (its NodeManagers, and
losing one while it runs) and :mod:`.cli` (``tony minicluster``). Nothing else in tony_workflow imports this package: the ``tony``
command loads it only for ``tony minicluster``, and tests and benchmarks use the names below.
"""
from __future__ import annotations

from .build import (
                    HADOOP_VERSION,
                    JAVA_MODULE_OPTIONS,
                    Java,
                    MiniClusterError,
                    Progress,
                    ensure_hadoop_jars,
                    ensure_launcher_classes,
                    find_java,
                    hadoop_lib_dir,
)
from .cli import add_parser, main
from .cluster import client_env, login, start, status, stop
from .nodes import nodemanager_of, nodemanagers, stop_datanode, stop_nodemanager
from .scheduling import URGENT_QUEUE

__all__ = [
                    "HADOOP_VERSION",
                    "JAVA_MODULE_OPTIONS",
                    "URGENT_QUEUE",
                    "Java",
                    "MiniClusterError",
                    "Progress",
                    "add_parser",
                    "client_env",
                    "ensure_hadoop_jars",
                    "ensure_launcher_classes",
                    "find_java",
                    "hadoop_lib_dir",
                    "login",
                    "main",
                    "nodemanager_of",
                    "nodemanagers",
                    "start",
                    "status",
                    "stop",
                    "stop_datanode",
                    "stop_nodemanager",
]
