"""``tony minicluster start|stop|status|env|nodemanager``: the mini cluster's command line.

The ``tony`` command hands everything after ``minicluster`` to :func:`main` and imports this
module only then, so that no other command pays for loading the mini cluster. :func:`add_parser`
builds the same commands into another parser's subcommands, for a program that wants them parsed
up front. Either way a :class:`MiniClusterError` becomes its message on stderr and exit status 2,
never a traceback.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Sequence

from .build import HADOOP_VERSION, MiniClusterError
from .cluster import client_env, login, start, status, stop
from .nodes import nodemanagers, stop_nodemanager
from .scheduling import parse_node_labels

__all__ = ["add_parser", "build_parser", "main"]

# start()'s defaults, shown by --help.
_DEFAULTS = {"nodemanagers": 1, "datanodes": 1, "gpus_per_nm": None, "nm_memory_mb": 16384, "nm_vcores": 16}

_PROG = "tony minicluster"
_HELP = f"run a local Hadoop {HADOOP_VERSION} cluster (YARN + HDFS)"
_DESCRIPTION = (f"A real Hadoop {HADOOP_VERSION} YARN + HDFS cluster in one background JVM, for tests and "
                "trials of the yarn backend.")


def _cmd_start(args: argparse.Namespace) -> int:
    info = start(args.dir, nodemanagers=args.nodemanagers, gpus_per_nm=args.gpus, nm_memory_mb=args.memory_mb,
                 nm_vcores=args.vcores, timeout=args.timeout, rm_port=args.rm_port, rm_web_port=args.rm_web_port,
                 namenode_port=args.namenode_port, webhdfs_port=args.webhdfs_port, secure=args.secure,
                 preemption=args.preemption, node_labels=parse_node_labels(args.node_labels),
                 max_priority=args.max_priority, node_expiry_s=args.node_expiry_s,
                 distinct_hosts=args.distinct_hosts, isolated=args.isolated, memory_limits=args.memory_limits,
                 datanodes=args.datanodes, progress=lambda msg: print(f"tony minicluster: {msg}", file=sys.stderr, flush=True))
    print(json.dumps(info, indent=1))
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    was_running = stop(args.dir, timeout=args.timeout)
    print("stopped" if was_running else "no mini cluster was running", file=sys.stderr)
    return 0


def _running(directory) -> dict | None:
    """The running cluster's record, or None after saying there is none."""
    info = status(directory)
    if info is None:
        print("no mini cluster is running", file=sys.stderr)
    return info


def _cmd_status(args: argparse.Namespace) -> int:
    info = _running(args.dir)
    if info is None:
        return 1
    print(json.dumps(info, indent=1))
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    info = _running(args.dir)
    if info is None:
        return 1
    env = client_env(info)
    names = ["HADOOP_CONF_DIR", "JAVA_HOME", "PATH"]
    if info.get("secure"):
        # The exports are only worth having with a ticket in the cache they name.
        login(info)
        names += ["KRB5_CONFIG", "KRB5CCNAME"]
    for var in names:
        print(f"export {var}={shlex.quote(env[var])}")
    return 0


def _cmd_nodemanager_list(args: argparse.Namespace) -> int:
    info = _running(args.dir)
    if info is None:
        return 1
    print(json.dumps(nodemanagers(info), indent=1))
    return 0


def _cmd_nodemanager_stop(args: argparse.Namespace) -> int:
    node = stop_nodemanager(args.dir, args.index, timeout=args.timeout, wait_lost=args.wait_lost)
    print(json.dumps(node, indent=1))
    return 0


def _run(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except MiniClusterError as e:
            print(f"tony minicluster: {e}", file=sys.stderr)
            return 2
    return run


def _add_commands(mc: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sub = mc.add_subparsers(dest="minicluster_command", required=True)

    def with_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--dir", help="the cluster's directory (default $TONY_HOME/minicluster)")
        return p

    s = with_dir(sub.add_parser("start", help="start a cluster and print its cluster.json"))
    s.add_argument("--nodemanagers", type=int, default=_DEFAULTS["nodemanagers"])
    s.add_argument("--datanodes", type=int, default=_DEFAULTS["datanodes"],
                   help="HDFS DataNodes; every block is kept on each of them, up to three")
    s.add_argument("--gpus", type=int, default=_DEFAULTS["gpus_per_nm"],
                   help="yarn.io/gpu per NodeManager (default: this machine's GPUs; more are stand-ins with no GPU "
                        "behind them, for trying GPU scheduling)")
    s.add_argument("--memory-mb", type=int, default=_DEFAULTS["nm_memory_mb"], help="memory per NodeManager")
    s.add_argument("--vcores", type=int, default=_DEFAULTS["nm_vcores"], help="vcores per NodeManager")
    s.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the daemons")
    s.add_argument("--secure", action="store_true",
                   help="Kerberos everywhere: run a KDC, secure every daemon, and make the user a principal and "
                        "keytab (needs kinit)")
    s.add_argument("--preemption", action="store_true",
                   help="two queues, default and urgent, each guaranteed half the cluster and allowed all of it, and "
                        "the preemption monitor, which takes containers back within seconds for the queue under "
                        "its share")
    s.add_argument("--node-labels", default="", metavar="LABEL=INDEX[,...]",
                   help="give NodeManager INDEX (from 0) the exclusive node label LABEL, usable by every queue; "
                        "e.g. gpu=1")
    s.add_argument("--max-priority", type=int, default=0, metavar="N",
                   help="yarn.cluster.max-application-priority: the highest priority an application may be given "
                        "(default 0: none above the queues' default of 0)")
    s.add_argument("--distinct-hosts", action="store_true",
                   help="put NodeManager INDEX on 127.0.0.(INDEX+1), a host of its own, instead of all on "
                        "localhost: YARN places containers by host (locality, tasks spread over nodes)")
    s.add_argument("--isolated", action="store_true",
                   help="containers that cannot see this project, its virtualenv or the base Python's packages "
                        "(a mount namespace hides them), as on nodes with nothing but a base Python: jobs bring "
                        "their runtime and environment")
    s.add_argument("--memory-limits", action="store_true",
                   help="NodeManagers kill a container whose processes hold more physical memory than it was "
                        "given, as YARN does by default (exit status -104)")
    s.add_argument("--node-expiry-s", type=float, default=None, metavar="S",
                   help="declare a silent NodeManager LOST after S seconds (default: Hadoop's 600), so that "
                        "'nodemanager stop' loses a node quickly")
    for flag, what in (("--rm-port", "ResourceManager RPC"), ("--rm-web-port", "ResourceManager web/REST"),
                       ("--namenode-port", "NameNode RPC"), ("--webhdfs-port", "NameNode HTTP (WebHDFS)")):
        s.add_argument(flag, type=int, default=0, metavar="PORT", help=f"{what} port (default: any free port)")
    s.set_defaults(fn=_run(_cmd_start))

    t = with_dir(sub.add_parser("stop", help="stop the cluster"))
    t.add_argument("--timeout", type=float, default=60.0, help="seconds before the JVM is killed")
    t.set_defaults(fn=_run(_cmd_stop))

    with_dir(sub.add_parser("status", help="print cluster.json if the cluster runs")).set_defaults(
        fn=_run(_cmd_status))
    with_dir(sub.add_parser("env", help="print shell exports for Hadoop clients (eval them); on a secure cluster, "
                                        "also log the user in to the cluster's ticket cache")).set_defaults(
        fn=_run(_cmd_env))

    nm = sub.add_parser("nodemanager", help="list the NodeManagers, or stop one as if its machine had died")
    nm_sub = nm.add_subparsers(dest="nodemanager_command", required=True)
    with_dir(nm_sub.add_parser("list", help="print each NodeManager's index, node id, state and containers")
             ).set_defaults(fn=_run(_cmd_nodemanager_list))
    ns = with_dir(nm_sub.add_parser("stop", help="stop a NodeManager and kill its containers without telling the "
                                                 "ResourceManager, which then declares the node LOST"))
    ns.add_argument("--index", type=int, required=True, help="which NodeManager, from 0 (see 'nodemanager list')")
    ns.add_argument("--wait-lost", action="store_true", help="also wait until the ResourceManager declares it LOST")
    ns.add_argument("--timeout", type=float, default=60.0, help="seconds each wait may take")
    ns.set_defaults(fn=_run(_cmd_nodemanager_stop))
    return mc


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Adds ``minicluster start|stop|status|env|nodemanager`` to another command's ``subparsers``; the parsed
    arguments' ``fn(args)`` runs the command and returns its exit status."""
    return _add_commands(subparsers.add_parser("minicluster", help=_HELP, description=_DESCRIPTION))


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``tony minicluster`` on its own."""
    return _add_commands(argparse.ArgumentParser(prog=_PROG, description=_DESCRIPTION))


def main(argv: Sequence[str] | None = None, *, parent: argparse.ArgumentParser | None = None) -> int:
    """Runs ``tony minicluster ARGV...`` and returns its exit status; bad arguments exit with
    status 2, as argparse does.

    ``parent`` is the parser of the command this one was handed on from: arguments no parser took
    are reported by it, as argparse reports them for a subcommand.
    """
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        (parent or parser).error(f"unrecognized arguments: {' '.join(extras)}")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
