"""A notebook as a task's program (:mod:`tony_workflow.task.notebook`): parameters as papermill
injects them, every cell run in a real Jupyter kernel of this interpreter, what the cells print on
the process's own streams, the executed copy written, and a raising cell failing the run with its
traceback. A notebook run as a job's task is tests/tony_workflow/jobs/test_notebook_jobs.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tony_workflow.spec.notebook import is_notebook, notebook_problem
from tony_workflow.task.notebook import executed_path, parameters

pytestmark = pytest.mark.job  # starts a Jupyter kernel


def notebook(path: Path, *cells: tuple[str, list[str]]) -> Path:
    """Writes a notebook of code cells, each ``(source, tags)``."""
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                        "language": "python"}},
          "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {"tags": tags}, "source": src, "outputs": [],
                     "execution_count": None} for i, (src, tags) in enumerate(cells)]}
    path.write_text(json.dumps(nb))
    return path


def run(path: Path, *params: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tony_workflow.task.notebook", str(path), *params],
                          capture_output=True, text=True, cwd=cwd, timeout=300, check=False,
                          env={**os.environ, "TMPDIR": str(cwd)})  # where its kernel's sockets go


def test_parameters_read_as_python_literals_or_words():
    assert parameters(["--lr", "0.01", "--epochs", "3", "--name", "mnist", "--dry-run", "--layers=[64, 32]"]) == {
        "lr": 0.01, "epochs": 3, "name": "mnist", "dry_run": True, "layers": [64, 32]}
    assert parameters(["lr=0.5", "tag=v1"]) == {"lr": 0.5, "tag": "v1"}
    with pytest.raises(ValueError, match="'train' is not a parameter"):
        parameters(["train"])
    with pytest.raises(ValueError, match="not a Python name"):
        parameters(["--2x", "1"])


def test_what_is_a_notebook_and_what_is_not(tmp_path):
    assert is_notebook("train.ipynb --lr 0.1") and not is_notebook("train.py") and not is_notebook(None)
    assert notebook_problem(tmp_path / "absent.ipynb") == f"the notebook absent.ipynb is not there ({tmp_path / 'absent.ipynb'})"
    (tmp_path / "text.ipynb").write_text("print('hello')")
    assert "text.ipynb is not a notebook: not JSON" in notebook_problem(tmp_path / "text.ipynb")
    (tmp_path / "old.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": []}))
    assert "not a notebook of format 4" in notebook_problem(tmp_path / "old.ipynb")
    assert notebook_problem(notebook(tmp_path / "ok.ipynb", ("1", []))) is None
    assert executed_path(Path("src/train.ipynb"), {"LOG_DIRS": "/logs/c1,/logs2/c1"}) == Path("/logs/c1/train.executed.ipynb")
    assert executed_path(Path("train.ipynb"), {}) == Path("train.executed.ipynb")


def test_the_parameters_override_the_defaults_and_the_cells_print_on_the_tasks_streams(tmp_path, monkeypatch):
    nb = notebook(tmp_path / "train.ipynb",
                  ("import os, sys\nlr = 0.1\nepochs = 1", ["parameters"]),
                  ("print(f'lr={lr} epochs={epochs} app={os.environ.get(\"TONY_APPLICATION_ID\")}')", []),
                  ("print('to stderr', file=sys.stderr)\nlr * 10", []))
    monkeypatch.setenv("TONY_APPLICATION_ID", "application_1_0007")  # the kernel sees the task's environment
    r = run(nb, "--lr", "0.5", "--epochs", "4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "lr=0.5 epochs=4 app=application_1_0007\n5.0\n" in r.stdout
    assert "to stderr" in r.stderr
    executed = json.loads((tmp_path / "train.executed.ipynb").read_text())
    tags = [c["metadata"].get("tags", []) for c in executed["cells"]]
    assert tags[1] == ["injected-parameters"], tags  # right after the cell of defaults
    assert "".join(executed["cells"][1]["source"]) == "# Parameters\nlr = 0.5\nepochs = 4\n"
    assert "".join(executed["cells"][2]["outputs"][0]["text"]).startswith("lr=0.5 epochs=4")


def test_a_cell_that_raises_fails_the_run_with_its_traceback_and_the_rest_does_not_run(tmp_path):
    nb = notebook(tmp_path / "fails.ipynb", ("print('first')", []), ("raise ValueError('the loss went to nan')", []),
                  ("print('never')", []))
    r = run(nb, cwd=tmp_path)
    assert r.returncode == 1
    assert "first" in r.stdout and "never" not in r.stdout
    assert "ValueError" in r.stderr and "the loss went to nan" in r.stderr and "cells after it did not run" in r.stderr
    assert "\x1b[" not in r.stderr  # IPython's colours taken out for the log
    assert not list(tmp_path.glob("tony-kernel-*"))  # the kernel's sockets went with it
    executed = json.loads((tmp_path / "fails.executed.ipynb").read_text())
    assert executed["cells"][1]["outputs"][0]["ename"] == "ValueError"  # kept, with the error


def test_bad_input_is_said_in_one_line_and_runs_nothing(tmp_path):
    (tmp_path / "text.ipynb").write_text("print('hello')")
    r = run(tmp_path / "text.ipynb", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("tony: text.ipynb is not a notebook: not JSON")
    assert "Traceback" not in r.stderr
    r = run(notebook(tmp_path / "ok.ipynb", ("1", [])), "train", cwd=tmp_path)
    assert r.returncode == 2 and "'train' is not a parameter" in r.stderr
    assert not (tmp_path / "ok.executed.ipynb").exists()
