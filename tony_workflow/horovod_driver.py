"""A Horovod job's driver: the rendezvous server of the job's workers, run as the job's ``driver``
task (``python -m tony_workflow.horovod_driver``), in the job's own Python, which must have Horovod.

It is started with the workers' hosts (``-w host:slots,...``, also ``CLUSTER_WORKER_LIST``), starts
Horovod's rendezvous server with one slot per worker task, and announces it by writing a file named
``<port>____HOROVOD_RENDEZVOUS_SERVER____`` into ``DRIVER_OUTPUT_PATH`` holding the plan of slots
(hostname, rank, localRank, crossRank, size, localSize, crossSize), as TonY's driver does. The
executor of the driver task reads that file and tells the ApplicationMaster, which only then gives
the workers their cluster spec, naming the server. The driver then serves until it is stopped.

``-t`` (TonY's ``tony.horovod.mode.test``) starts no server: the port is ``-p`` (9999) and the plan
is made from the worker list alone, so that a job can be tried without Horovod; ``-f`` with ``-t``
(``tony.horovod.mode.test.fast.fail``) makes the driver fail at once. A job in
``tony.horovod.driver.mode.debug`` runs a driver of its own instead, which must write the same file.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["PORT_FILE_SUFFIX", "main", "plan_of", "write_port_file"]

PORT_FILE_SUFFIX = "____HOROVOD_RENDEZVOUS_SERVER____"


def _hosts(worker_list: str) -> list[tuple[str, int]]:
    out = []
    for entry in (e.strip() for e in worker_list.split(",")):
        if entry:
            host, _, slots = entry.rpartition(":")
            out.append((host, int(slots)))
    return out


def plan_of(worker_list: str) -> list[dict[str, Any]]:
    """One slot per worker task, host by host as listed: ranks in that order, a slot's cross rank
    its place among the hosts that have a slot of its local rank (Horovod's host assignment)."""
    hosts = _hosts(worker_list)
    size = sum(n for _, n in hosts)
    plan, rank = [], 0
    for host, n in hosts:
        for local in range(n):
            holders = [h for h, m in hosts if m > local]
            plan.append({"hostname": host, "rank": rank, "localRank": local, "crossRank": holders.index(host),
                         "size": size, "localSize": n, "crossSize": len(holders)})
            rank += 1
    return plan


def write_port_file(directory: Path, port: int, plan: list[dict[str, Any]]) -> Path:
    """Announces the server: whole or not at all (written aside, then renamed)."""
    path = directory / f"{port}{PORT_FILE_SUFFIX}"
    part = directory / f".{port}.part"
    part.write_text(json.dumps(plan))
    os.replace(part, path)
    return path


def _serve(port_file: Path) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    port_file.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse  # the driver's own: executors import this module for its port file's name only
    ap = argparse.ArgumentParser(prog="python -m tony_workflow.horovod_driver")
    ap.add_argument("-w", "--worker-list", default=os.environ.get("CLUSTER_WORKER_LIST", ""),
                    help="the workers' hosts and slots: host:n,host:n")
    ap.add_argument("-t", dest="test", action="store_true", help="test mode: no server, a fixed port")
    ap.add_argument("-p", "--fake-port", type=int, default=9999, help="the port announced in test mode")
    ap.add_argument("-f", dest="fail", action="store_true", help="with -t: fail at once")
    args = ap.parse_args(argv)
    out = Path(os.environ.get("DRIVER_OUTPUT_PATH") or ".")
    if not args.worker_list:
        print("horovod driver: no workers (-w or CLUSTER_WORKER_LIST)", file=sys.stderr)
        return 2
    if args.test:
        if args.fail:
            print("horovod driver: test mode, failing at once (tony.horovod.mode.test.fast.fail)", file=sys.stderr)
            return 1
        plan = plan_of(args.worker_list)
        print(f"horovod driver: test mode, no server; announcing port {args.fake_port} for {len(plan)} slots",
              flush=True)
        return _serve(write_port_file(out, args.fake_port, plan))
    try:
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousServer
    except ImportError as e:
        print(f"horovod driver: Horovod cannot be imported in this job's Python ({e}): give the job an "
              "environment with Horovod (python_venv), or try it with tony.horovod.mode.test=true", file=sys.stderr)
        return 1
    server = RendezvousServer(verbose=1)
    port = server.start()
    assignments = get_host_assignments(parse_hosts(args.worker_list), 1)
    server.init(assignments)
    plan = [{"hostname": a.hostname, "rank": a.rank, "localRank": a.local_rank, "crossRank": a.cross_rank,
             "size": a.size, "localSize": a.local_size, "crossSize": a.cross_size} for a in assignments]
    print(f"horovod driver: rendezvous server on port {port} for {len(plan)} slots", flush=True)
    return _serve(write_port_file(out, port, plan))


if __name__ == "__main__":
    sys.exit(main())
