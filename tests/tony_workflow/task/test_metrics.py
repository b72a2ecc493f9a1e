"""The executor's sampler (:mod:`tony_workflow.task.metrics`): a real process tree's figures, which GPUs a task
sees, and GPU figures from NVML (a fake one: this machine has no GPU; the tests say so where used)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from tests.conftest import wait_for
from tony_workflow.task.metrics import GpuSampler, TaskSampler, visible_gpus


def test_the_sampler_measures_a_real_process_tree():
    script = ("import subprocess, sys, time\n"
              "block = bytearray(80 * 1024 * 1024)\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: pass'])\n"
              "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_for(lambda: psutil.Process(proc.pid).children(), timeout=10)
        sampler = TaskSampler()
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]

        def cpu_seconds() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in tree)
        # What the kernel counts for the tree over the same second, whatever share of a core the
        # spinning child gets on a busy machine.
        c0, t0 = cpu_seconds(), time.monotonic()
        sampler.sample(proc.pid)
        time.sleep(1.0)
        figures = sampler.sample(proc.pid)
        counted = 100 * (cpu_seconds() - c0) / (time.monotonic() - t0)
        assert figures["rss_mb"] >= 80 and figures["processes"] == 2
        assert figures["max_rss_mb"] >= figures["avg_rss_mb"] > 0
        assert counted > 5, "the child spins"
        assert abs(figures["cpu_percent"] - counted) <= max(10.0, 0.25 * counted), (figures["cpu_percent"], counted)
        assert "gpu_util_percent" not in figures
    finally:
        for p in psutil.Process(proc.pid).children():
            p.kill()
        proc.kill()
        proc.wait()


def test_visible_gpus_follow_cuda_rules():
    assert visible_gpus(None) is None
    assert visible_gpus("") == [] and visible_gpus("-1") == []
    assert visible_gpus("1,3") == ["1", "3"] and visible_gpus("0,-1,2") == ["0"]
    assert visible_gpus("GPU-0f3a") == ["GPU-0f3a"]


def test_gpu_figures_come_from_nvml_for_the_tasks_own_gpus(fake_nvml):
    # Fake NVML (no GPU here): what is tested is which devices are asked and how figures add up.
    figures = TaskSampler(GpuSampler(["1", "3"])).sample(os.getpid())
    assert figures["gpu_util_percent"] == 30.0 and figures["gpu_mem_mb"] == 6000.0
    assert [g["index"] for g in figures["gpus"]] == ["1", "3"]
    missing = GpuSampler(["GPU-unknown"])
    assert missing.sample() == [] and missing.disabled, "an unknown GPU turns GPU figures off, not the task"


def test_without_nvml_there_are_simply_no_gpu_figures(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as on a machine without the package
    sampler = GpuSampler(["0"])
    assert sampler.sample() == [] and sampler.disabled
