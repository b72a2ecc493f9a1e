"""The job's environment on bare nodes (:mod:`tony_workflow.backends.yarn.environment`): what the
job's source imports is traced to the installed distributions, each packed as a part of its own
named by its content and shipped once, a change shipping only the part that changed; and the
task's side joins the unpacked parts into one site directory (:func:`tony_workflow.task.workdir.join_parts`).
A real job on nodes with nothing installed: tests/tony_workflow/jobs/test_yarn_nodes.py."""
from __future__ import annotations

import json
import logging
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from tony_workflow.backends.yarn import environment as env_module
from tony_workflow.backends.yarn.app import Shipment
from tony_workflow.backends.yarn.environment import environment_plan, imports_of, part_of, roots_of, ship_environment
from tony_workflow.backends.yarn.ship import Cache
from tony_workflow.client import load_job
from tony_workflow.storage.local import LocalStorage
from tony_workflow.task.workdir import join_parts, joined


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tony-workflow" / "runtime"


def job(src: Path, **fields):
    spec = {"name": "env", "framework": "tensorflow", "executes": "train.py", "src_dir": str(src),
            "tasks": {"worker": {"instances": 1}}, **fields}
    return load_job(spec)


def source(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "src"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


def test_what_the_source_imports_is_traced_to_distributions_and_the_rest_named(tmp_path):
    src = source(tmp_path, {
        "train.py": "import os, json\nimport yaml\nfrom requests.adapters import HTTPAdapter\nimport helpers\n"
                    "from pkg.sub import x\nimport no_such_module_anywhere\nfrom . import sibling\n",
        "helpers.py": "import jinja2\n",
        "pkg/__init__.py": "", "pkg/sub.py": "from tony_workflow import report\n",
        "broken.py": "def (:\n"})
    assert set(imports_of(src)) >= {"yaml", "requests.adapters", "helpers", "pkg.sub", "jinja2", "tony_workflow"}
    roots, missing = roots_of(job(src, conf={"tony.task.tensorboard.enabled": "false"}))
    assert roots == {"pyyaml": "train.py imports yaml", "requests": "train.py imports requests",
                     "jinja2": "helpers.py imports jinja2"}, roots
    assert missing == {"no_such_module_anywhere": "train.py"}


def test_tensorboard_the_data_reader_and_named_packages_go_too(tmp_path):
    src = source(tmp_path, {"train.py": "from tony_workflow.data import dataset\n"})
    roots, _ = roots_of(job(src, conf={"tony.yarn.environment-packages": "tenacity"}))
    assert roots["tensorboard"] == "the chief runs TensorBoard"
    assert {"pyarrow", "fastavro", "google-crc32c"} <= set(roots)
    assert roots["tenacity"] == "tony.yarn.environment-packages names it"


def test_a_notebooks_imports_go_with_it_and_so_does_what_runs_it(tmp_path):
    cells = [{"cell_type": "markdown", "source": "import not_code"},
             {"cell_type": "code", "source": ["%matplotlib inline\n", "!pip list\n", "import yaml\n"]},
             {"cell_type": "code", "source": "from jinja2 import Template"}]
    src = source(tmp_path, {"train.ipynb": json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                                       "cells": cells})})
    assert set(imports_of(src)) == {"yaml", "jinja2"}  # code cells only, IPython's magics passed over
    roots, missing = roots_of(job(src, executes="train.ipynb", conf={"tony.task.tensorboard.enabled": "false"}))
    assert roots["pyyaml"] == "train.ipynb imports yaml" and roots["jinja2"] == "train.ipynb imports jinja2"
    for name in ("nbclient", "nbformat", "ipykernel"):
        assert roots[name] == "the job executes a notebook (train.ipynb)", roots
    assert not missing


def test_each_distribution_is_a_part_of_its_own_named_by_its_content_and_packed_once(tmp_path, cache):
    src = source(tmp_path, {"train.py": "import requests\n"})
    plan = environment_plan(job(src, conf={"tony.task.tensorboard.enabled": "false"}))
    names = {p.name for p in plan.parts}
    assert {"requests", "urllib3", "idna", "certifi", "charset-normalizer"} <= names
    assert "tony-workflow" not in names and "tensorflow" not in names
    part = next(p for p in plan.parts if p.name == "requests")
    assert part.path.parent == cache and part.key.startswith(f"env-requests-{metadata.version('requests')}-")
    assert part.path.name == f"{part.key}.tar"  # NodeManagers unpack a tar with the system's tar
    with tarfile.open(part.path) as tar:
        members = tar.getmembers()
    tops = {m.name.split("/")[0] for m in members}
    assert "requests" in tops and "urllib3" not in tops  # its own files only
    assert all(m.isfile() and m.mtime == members[0].mtime and m.uid == 0 for m in members)
    stamp = part.path.stat().st_mtime_ns
    assert part_of("requests", metadata.distribution("requests")) == part
    assert part.path.stat().st_mtime_ns == stamp  # not packed again


def test_what_no_running_job_reads_is_left_out_of_its_distributions_part_under_a_key_of_its_own(cache, monkeypatch):
    from tony_workflow.backends.yarn import environment

    # TensorFlow's headers, in its case (1.5 GB to pack here): the same rule on a small distribution.
    assert environment._LEFT_OUT["tensorflow"] == ("tensorflow/include/",)
    whole = part_of("requests", metadata.distribution("requests"))
    monkeypatch.setitem(environment._LEFT_OUT, "requests", ("requests/__version__.py", "requests/help.py"))
    lean = part_of("requests", metadata.distribution("requests"))
    assert lean.key == whole.key + "-lean" and lean.path != whole.path  # never the whole part's cached copy
    with tarfile.open(whole.path) as a, tarfile.open(lean.path) as b:
        assert set(a.getnames()) - set(b.getnames()) == {"requests/__version__.py", "requests/help.py"}


def test_a_second_job_ships_nothing_and_a_changed_distribution_ships_alone(tmp_path, monkeypatch, caplog):
    src = source(tmp_path, {"train.py": "import requests\n"})
    spec = job(src, conf={"tony.task.tensorboard.enabled": "false"})
    hdfs = Cache(LocalStorage(tmp_path / "hdfs"), f"file://{tmp_path / 'hdfs'}", user="someone")
    uploads = []
    real = LocalStorage.publish

    def publish(self, local, key, progress=None):
        uploads.append(Path(local).name)
        return real(self, local, key, progress)

    monkeypatch.setattr(LocalStorage, "publish", publish)
    caplog.set_level(logging.INFO, logger="tony.ship")
    first = Shipment("python3")
    ship_environment(spec, first, hdfs)
    assert len(uploads) == len(first.environment) >= 5 and all(n.startswith("env-") for n in first.environment)
    assert "to upload" in caplog.text
    uploads.clear()
    caplog.clear()
    second = Shipment("python3")
    ship_environment(spec, second, hdfs)
    assert uploads == [] and second.environment == first.environment
    assert "every one already in the cache" in caplog.text
    # idna changed (another build of the same version): its part alone is new.
    real_digest = env_module._record_digest
    monkeypatch.setattr(env_module, "_record_digest",
                        lambda d, *described: real_digest(d, *described) + (
                            "x" if d.metadata["Name"].lower() == "idna" else ""))
    third = Shipment("python3")
    ship_environment(spec, third, hdfs)
    assert len(uploads) == 1 and uploads[0].startswith("env-idna-"), uploads
    assert "1 to upload" in caplog.text


def test_the_parts_are_joined_into_one_site_directory_of_links(tmp_path):
    a, b = tmp_path / "env-a", tmp_path / "env-b"
    for part, files in ((a, ["google/protobuf/__init__.py", "alone_a/x.py", "shared.txt"]),
                        (b, ["google/auth/__init__.py", "alone_b/y.py", "shared.txt"])):
        for name in files:
            (part / name).parent.mkdir(parents=True, exist_ok=True)
            (part / name).write_text(part.name)
    target = join_parts([str(a), str(b)], tmp_path / "joined")
    assert (target / "alone_a").is_symlink() and (target / "alone_b").is_symlink()
    google = target / "google"  # both parts fill it: a directory of its own, of links to each one's entries
    assert google.is_dir() and not google.is_symlink()
    assert (google / "protobuf" / "__init__.py").read_text() == "env-a"
    assert (google / "auth" / "__init__.py").read_text() == "env-b"
    assert (target / "shared.txt").read_text() == "env-a"  # the first part keeps a file both bring
    # In a container, the parts are joined once, beside them.
    once = joined([str(a), str(b)])
    assert once == tmp_path / "environment" and joined([str(a), str(b)]) == once


def test_which_distribution_provides_a_module_is_read_once_until_one_is_installed(tmp_path, monkeypatch, cache):
    # Reading every distribution's files to learn which modules each provides takes a second with
    # TensorFlow installed: a submission keeps the answer, and an install is seen at once.
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    src = source(tmp_path, {"train.py": "import requests\nimport tony_probe_mod\n"})
    spec = job(src, conf={"tony.task.tensorboard.enabled": "false"})
    roots, missing = roots_of(spec)
    assert "requests" in roots and missing == {"tony_probe_mod": "train.py"}
    kept = list(cache.glob("packages-*.json"))
    assert len(kept) == 1 and '"requests"' in kept[0].read_text()
    read = []
    monkeypatch.setattr(env_module.metadata, "packages_distributions",
                        lambda real=metadata.packages_distributions: read.append(1) or real())
    assert roots_of(spec) == (roots, missing) and read == []  # kept: nothing read again
    # A distribution installed (as an installer writes one) providing the missing module.
    info = site / "tony_probe-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tony-probe\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("tony_probe_mod\n")
    (info / "RECORD").write_text("tony_probe_mod.py,,\n")
    (site / "tony_probe_mod.py").write_text("")
    roots, missing = roots_of(spec)
    assert read == [1] and roots["tony-probe"] == "train.py imports tony_probe_mod" and missing == {}


def test_a_distributions_data_files_go_in_its_part_under_the_shipped_data_directory():
    # JupyterLab's pages are files its wheel puts under the environment's share/, named by no
    # import: a node with nothing installed needs them all the same.
    from tony_workflow.backends.yarn.runtime import _dist_files
    from tony_workflow.protocol import SHIPPED_DATA_DIR
    names = [rel for _, rel in _dist_files({"jupyterlab": metadata.distribution("jupyterlab")}, "")]
    assert "jupyterlab/__init__.py" in names and not any(n.startswith("..") for n in names)
    static = [n for n in names if n.startswith(f"{SHIPPED_DATA_DIR}/share/jupyter/lab/static/")]
    assert any(n.endswith("/index.html") for n in static), names[:20]
    # Its scripts (bin/) stay behind: the task's interpreter runs modules.
    assert not any("/bin/" in n for n in names if n.startswith(SHIPPED_DATA_DIR))
