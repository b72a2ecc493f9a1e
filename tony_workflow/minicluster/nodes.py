"""A running mini cluster's NodeManagers: which is which, what the ResourceManager thinks of each
and which containers each runs, and stopping one as if its machine had died.

A stopped NodeManager kills its containers' processes but does not tell the ResourceManager, which
declares the node LOST once ``node_expiry_s`` (see :mod:`.scheduling`) passes without a heartbeat
and reports the node's containers to their ApplicationMasters as ABORTED (exit status -100,
"Container released on a *lost* node"), as when a machine dies. A stopped NodeManager stays
stopped until the cluster is: MiniYARNCluster cannot start a new one in its place.

The launcher's JVM is asked through a file under ``run/control/`` (see its
``serveControlRequests``), and the outcome is recorded in ``cluster.json``, whose ``nodes`` list
says which NodeManagers were stopped.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import psutil

from .build import MiniClusterError
from .cluster import _default_dir, _get_json, _running, rm_nodes
from .config import write_file

# Two NodeManager heartbeats (Hadoop's default interval, 1 s, which the mini cluster keeps) and a
# margin: after that long without one, the scheduler no longer places containers on a node.
SCHEDULER_SKIPS_AFTER_S = 3.0

__all__ = ["nodemanager_of", "nodemanagers", "stop_datanode", "stop_nodemanager"]


def _cluster(directory: str | os.PathLike[str] | None) -> tuple[Path, dict]:
    d = Path(directory or _default_dir()).expanduser().resolve()
    if _running(d) is None:
        raise MiniClusterError(f"no mini cluster is running in {d}")
    try:
        return d, json.loads((d / "cluster.json").read_text())
    except (OSError, ValueError):
        raise MiniClusterError(f"the mini cluster in {d} is still starting") from None


def nodemanagers(info: dict) -> list[dict]:
    """The NodeManagers of the running cluster ``info`` (its ``cluster.json``), by index, each with
    ``state``, what the ResourceManager reports of it (RUNNING, LOST, ...; None when its REST API
    does not answer, as on a secure cluster without SPNEGO), and ``containers``, the containers it
    holds, by id, with the NodeManager's state of each (NEW, LOCALIZING, RUNNING, DONE, ...; none
    once it is stopped)."""
    by_id = {n.get("id"): n for n in rm_nodes(info["rm_web"]) or []}
    out = []
    for node in info["nodes"]:
        containers: dict[str, str] = {}
        if not node["stopped"]:
            listed = (_get_json(f"http://{node['http_address']}/ws/v1/node/containers") or {}).get("containers") or {}
            containers = {c["id"]: c.get("state") for c in sorted(listed.get("container") or [], key=lambda c: c["id"])}
        out.append({**node, "state": by_id.get(node["node_id"], {}).get("state"), "containers": containers})
    return out


def nodemanager_of(info: dict, address: str) -> int:
    """The index of the NodeManager that ``address`` names: its node id (``host:port``, as the
    ResourceManager's reports give it) or its web address (as skein's container reports give it in
    ``yarn_node_http_address``)."""
    for node in info["nodes"]:
        if address in (node["node_id"], node["http_address"]):
            return node["index"]
    raise MiniClusterError(f"no NodeManager of this cluster is at {address}; they are "
                           f"{[(n['node_id'], n['http_address']) for n in info['nodes']]}")


def _ask_to_stop(d: Path, info: dict, kind: str, what: str, index: int, timeout: float) -> str:
    """Asks the launcher's JVM to stop daemon ``index`` of ``kind`` (``nodemanager``,
    ``datanode``) through a file under ``run/control/``; returns its answer."""
    control = d / "run" / "control"
    request, done = control / f"stop-{kind}-{index}", control / f"stop-{kind}-{index}.done"
    done.unlink(missing_ok=True)
    write_file(request, "")
    deadline = time.monotonic() + timeout
    while not done.exists():
        if _running(d) is None:
            raise MiniClusterError(f"the mini cluster in {d} stopped before {what} did")
        if time.monotonic() > deadline:
            request.unlink(missing_ok=True)
            raise MiniClusterError(f"{what} did not stop within {timeout:.0f} s; see {info['log']}")
        time.sleep(0.2)
    return done.read_text().strip()


def stop_nodemanager(directory: str | os.PathLike[str] | None = None, index: int = 0, *, timeout: float = 60.0,
                     wait_lost: bool = False) -> dict:
    """Stops NodeManager ``index`` of the cluster in ``directory``, killing its containers, without
    telling the ResourceManager, and returns its entry of ``cluster.json``'s ``nodes`` once the
    scheduler no longer places containers there (the node is still listed RUNNING). With
    ``wait_lost``, also waits until the ResourceManager declares the node LOST, which takes
    ``node_expiry_s`` (Hadoop's default, unless the cluster was started with a shorter one, is
    ten minutes). ``timeout`` bounds each wait."""
    d, info = _cluster(directory)
    nodes = info["nodes"]
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(nodes):
        raise MiniClusterError(f"no NodeManager {index!r}: this cluster's are numbered 0 to {len(nodes) - 1}")
    if nodes[index]["stopped"]:
        raise MiniClusterError(f"NodeManager {index} ({nodes[index]['node_id']}) is already stopped")
    # A machine that dies runs nothing more: its containers' processes are frozen before the
    # NodeManager stops, so that its SIGTERM (the graceful stop a NodeManager gives its containers)
    # is never handled, and killed once it has stopped.
    frozen = _signal_containers(nodes[index]["node_id"], signal.SIGSTOP)
    outcome = _ask_to_stop(d, info, "nodemanager", f"NodeManager {index}", index, timeout)
    for proc in frozen:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    if not outcome.startswith("stopped "):
        raise MiniClusterError(f"NodeManager {index} could not be stopped: {outcome}")
    nodes[index]["stopped"] = True
    write_file(d / "cluster.json", json.dumps(info, indent=1) + "\n")
    # Hadoop 3.5's CapacityScheduler places containers asynchronously, on any node that heartbeat
    # within the last two intervals (yarn.scheduler.skip.node.multiplier): until then an
    # application's AM may still be sent to the dead node, and fail to launch there.
    time.sleep(SCHEDULER_SKIPS_AFTER_S)

    if wait_lost:
        node_id = nodes[index]["node_id"]
        deadline = time.monotonic() + timeout
        while True:
            state = next((n.get("state") for n in rm_nodes(info["rm_web"]) or [] if n.get("id") == node_id), None)
            if state == "LOST":
                break
            if time.monotonic() > deadline:
                expiry = info.get("node_expiry_s")
                raise MiniClusterError(
                    f"the ResourceManager did not declare {node_id} LOST within {timeout:.0f} s (it is {state}); "
                    f"it waits {f'{expiry} s' if expiry else 'ten minutes'} for a silent NodeManager "
                    f"(tony minicluster start --node-expiry-s)")
            time.sleep(0.5)
    return nodes[index]


def _signal_containers(node_id: str, sig: int) -> list[psutil.Process]:
    """Sends ``sig`` to every process a container of the NodeManager ``node_id`` (``host:port``)
    started and returns them. YARN names the NodeManager in each container's environment; its
    port alone tells this cluster's NodeManagers apart (their host names may be aliases)."""
    port = node_id.rpartition(":")[2]
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("NM_PORT") == port:
                proc.send_signal(sig)
                found.append(proc)
        except psutil.Error:
            continue
    return found


def stop_datanode(directory: str | os.PathLike[str] | None = None, index: int = 0, *, timeout: float = 60.0) -> dict:
    """Stops DataNode ``index`` of the cluster in ``directory`` without telling the NameNode, as
    when its machine dies: the NameNode keeps naming it among the blocks' locations (and sending
    WebHDFS readers to it) until it declares it dead, ten minutes later by default. Returns its
    entry of ``cluster.json``'s ``datanodes``."""
    d, info = _cluster(directory)
    datanodes = info.get("datanodes") or []
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(datanodes):
        raise MiniClusterError(f"no DataNode {index!r}: this cluster's are numbered 0 to {len(datanodes) - 1}")
    if datanodes[index]["stopped"]:
        raise MiniClusterError(f"DataNode {index} ({datanodes[index]['xfer_address']}) is already stopped")
    outcome = _ask_to_stop(d, info, "datanode", f"DataNode {index}", index, timeout)
    if not outcome.startswith("stopped "):
        raise MiniClusterError(f"DataNode {index} could not be stopped: {outcome}")
    datanodes[index]["stopped"] = True
    write_file(d / "cluster.json", json.dumps(info, indent=1) + "\n")
    return dict(datanodes[index])
