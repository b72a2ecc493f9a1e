"""Fixtures of the runtime's tests."""
from __future__ import annotations

import os
import sys
import textwrap

import pytest

FAKE_NVML = textwrap.dedent('''
    """A stand-in for nvidia-ml-py's pynvml on a machine without a GPU: every device reports
    a utilisation of 10 x (index + 1) % and 1000 x (index + 1) MiB used of 16 GiB."""
    import os

    class NVMLError(Exception):
        pass

    class _Handle:
        def __init__(self, index):
            self.index = index

    class _Util:
        def __init__(self, gpu):
            self.gpu, self.memory = gpu, 0

    class _Mem:
        def __init__(self, used):
            self.used, self.total, self.free = used, 16 << 30, (16 << 30) - used

    def nvmlInit():
        with open(os.environ.get("FAKE_NVML_LOG", os.devnull), "a") as log:
            log.write("init\\n")

    def nvmlDeviceGetCount():
        return 4

    def nvmlDeviceGetHandleByIndex(index):
        if index >= 4:
            raise NVMLError("Invalid Argument")
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(uuid):
        raise NVMLError("Not Found")

    def nvmlDeviceGetUtilizationRates(handle):
        return _Util(10 * (handle.index + 1))

    def nvmlDeviceGetMemoryInfo(handle):
        return _Mem(1000 * (handle.index + 1) << 20)
''')


@pytest.fixture
def fake_nvml(tmp_path, monkeypatch):
    """A fake pynvml first on the path: this machine has no GPU and no NVML library."""
    d = tmp_path / "fake-nvml"
    d.mkdir()
    (d / "pynvml.py").write_text(FAKE_NVML)
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    return d


@pytest.fixture
def fake_gpu_machine(fake_nvml, local_site, monkeypatch):
    """The embedded cluster of a machine with four GPUs (0 to 3), whose NVIDIA library is the
    stand-in above, on the executors' path (this machine has neither): its jobs are real, their
    GPU figures the stand-in's."""
    local_site({"tony.local.gpus": "0,1,2,3", "tony.local.env-whitelist": "PYTHONPATH"})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake_nvml), os.environ.get("PYTHONPATH", "")]))
    return fake_nvml
