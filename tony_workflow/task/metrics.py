"""What a task uses: the executor's sampler of its user process tree and of its GPUs.

Every ``tony.task.metrics-interval-ms`` the executor samples the user process and all its
descendants (memory as resident set size, CPU as a percentage of one core, summed over the tree)
and, with ``tony.task.gpu-metrics.enabled``, each GPU the task may use, through NVML
(``nvidia-ml-py``). The latest figures ride on every heartbeat; the AM shows them in
``JobStatus.tasks[].metrics`` and keeps the final ones in the task's last event and in the job's
history, where they answer "how much did this task really need".

A machine without NVML (no driver, no GPU) simply reports no GPU figures; the sampler says why once
in the executor's log and stops asking.
"""
from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["GpuSampler", "TaskSampler", "visible_gpus"]

log = logging.getLogger("tony.metrics")
MB = 1024 * 1024


def visible_gpus(cuda_visible_devices: str | None) -> list[str] | None:
    """The GPUs named by ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs); None when it is unset, [] when
    it hides every GPU."""
    if cuda_visible_devices is None:
        return None
    names = [n.strip() for n in cuda_visible_devices.split(",") if n.strip()]
    # CUDA stops at the first invalid entry; "-1" is the usual way to hide all GPUs.
    out = []
    for n in names:
        if n.startswith("-"):
            break
        out.append(n)
    return out


class GpuSampler:
    """Utilisation and memory of the task's GPUs, through NVML. ``devices`` are indices or UUIDs as
    in ``CUDA_VISIBLE_DEVICES``; None means every GPU NVML sees (a container whose GPUs are isolated
    by the cluster rather than named in its environment)."""

    def __init__(self, devices: list[str] | None):
        self.devices = devices
        self._nvml: Any = None
        self._handles: list[tuple[str, Any]] | None = None
        self.disabled = devices == []

    def _open(self) -> None:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        self._nvml = pynvml
        if self.devices is None:
            names = [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        else:
            names = self.devices
        handles = []
        for name in names:
            if name.isdigit():
                handles.append((name, pynvml.nvmlDeviceGetHandleByIndex(int(name))))
            else:
                handles.append((name, pynvml.nvmlDeviceGetHandleByUUID(name)))
        self._handles = handles

    def sample(self) -> list[dict[str, Any]]:
        """One figure per GPU: ``index``, ``util_percent``, ``mem_mb``, ``mem_total_mb``; [] when
        there is nothing to measure."""
        if self.disabled:
            return []
        try:
            if self._handles is None:
                self._open()
            nvml = self._nvml
            out = []
            for name, handle in self._handles:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append({"index": name, "util_percent": float(util.gpu),
                            "mem_mb": round(mem.used / MB, 1), "mem_total_mb": round(mem.total / MB, 1)})
            return out
        except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, a GPU that went away, ...
            log.info("no GPU metrics: %s", e)
            self.disabled = True
            return []


class TaskSampler:
    """Resource figures of one process tree: the current, largest and average RSS in MB (over the
    samples taken), CPU % of one core (summed over the tree, since the previous sample) and, with a
    :class:`GpuSampler`, the GPUs' mean utilisation and total memory used."""

    def __init__(self, gpus: GpuSampler | None = None):
        self.gpus = gpus
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process, kept so cpu_percent has a baseline
        self.samples = 0
        self.max_rss_mb = 0.0
        self._rss_total = 0.0
        self.latest: dict[str, Any] = {}

    def sample(self, root_pid: int) -> dict[str, Any]:
        """Samples the tree under ``root_pid``; the figures so far (the previous ones when it is gone)."""
        import psutil

        try:
            root = self._procs.get(root_pid) or psutil.Process(root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return self.latest
        rss = cpu = 0.0
        alive: dict[int, Any] = {}
        for proc in tree:
            known = self._procs.get(proc.pid)
            proc = known if known is not None and known == proc else proc  # same pid and start time
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    # The first call on a process has no baseline and reads 0; later ones measure
                    # since the previous sample.
                    cpu += proc.cpu_percent(None)
            except psutil.Error:
                continue
            alive[proc.pid] = proc
        self._procs = alive
        rss_mb = rss / MB
        self.samples += 1
        self._rss_total += rss_mb
        self.max_rss_mb = max(self.max_rss_mb, rss_mb)
        figures: dict[str, Any] = {
            "rss_mb": round(rss_mb, 1), "max_rss_mb": round(self.max_rss_mb, 1),
            "avg_rss_mb": round(self._rss_total / self.samples, 1), "cpu_percent": round(cpu, 1),
            "processes": len(alive), "sampled_at": round(time.time(), 3),
        }
        gpus = self.gpus.sample() if self.gpus else []
        if gpus:
            figures["gpu_util_percent"] = round(sum(g["util_percent"] for g in gpus) / len(gpus), 1)
            figures["gpu_mem_mb"] = round(sum(g["mem_mb"] for g in gpus), 1)
            figures["gpus"] = gpus
        self.latest = figures
        return figures
