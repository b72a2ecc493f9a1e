"""What a YARN job brings to nodes with nothing installed (:mod:`tony_workflow.backends.yarn.runtime`):
the runtime archive holds this package and what the AM and the executors import, never the
training frameworks, is named by its versions and built once. The job's environment is
test_environment.py's. Jobs run from them on the isolated mini cluster in
tests/tony_workflow/jobs/test_yarn_nodes.py."""
from __future__ import annotations

import zipfile

import pytest

from tony_workflow.backends.yarn import runtime as yarn_runtime
from tony_workflow.backends.yarn.runtime import base_python, runtime, runtime_key, task_path


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tony-workflow" / "runtime"


def test_the_runtime_holds_this_package_and_what_it_imports_but_no_framework(cache):
    pack = runtime()
    assert pack.path.parent == cache and pack.path.name == f"{pack.key}.zip" and pack.size > 1_000_000
    with zipfile.ZipFile(pack.path) as z:
        names = set(z.namelist())
    assert "tony/tony_workflow/__init__.py" in names and "tony/tony_workflow/am/master.py" in names
    for module in ("requests/__init__.py", "psutil/__init__.py", "skein/__init__.py", "pyhdfs/__init__.py",
                   "grpc/__init__.py", "yaml/__init__.py", "tenacity/__init__.py"):
        assert f"lib/{module}" in names, module
    tops = {n.split("/")[1] for n in names if n.startswith("lib/")}
    assert not tops & {"tensorflow", "torch", "jax", "keras", "airflow", "numpy"}, tops
    assert not any(n.startswith("lib/skein/java/") or n.endswith(".pyc") or "/__pycache__/" in n for n in names)
    assert not any("minicluster/src" in n for n in names)  # the mini cluster's Java is the client's business


def test_it_is_built_once_per_version_and_named_by_what_it_holds(cache, monkeypatch):
    first = runtime()
    stamp = first.path.stat().st_mtime_ns
    again = runtime()
    assert again == first and again.path.stat().st_mtime_ns == stamp  # not built again
    assert runtime_key() == first.key
    # Another version of a distribution is another runtime.
    real = yarn_runtime._platform
    monkeypatch.setattr(yarn_runtime, "_platform", lambda: [*real(), "another"])
    assert runtime_key() != first.key


def test_the_nodes_python_and_a_tasks_path():
    import sys
    assert base_python() == f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert task_path("/c") == "/c/runtime/tony"
