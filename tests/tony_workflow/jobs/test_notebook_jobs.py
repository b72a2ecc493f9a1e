"""A notebook as what a job executes, for real on the embedded cluster: ``executes: train.ipynb`` runs
it top to bottom in every task, with the job's ``task_params`` as its parameters, its cells'
output in the task's output, the executed copy beside it; a raising cell fails the job with its
traceback; a file that is no notebook is refused before anything is submitted."""
from __future__ import annotations

import json

import pytest

from tests.conftest import app_processes, run_tony, wait_for
from tests.tony_workflow.task.test_notebook import notebook
from tony_workflow.client import TonyClient, load_job
from tony_workflow.spec import SpecError

pytestmark = pytest.mark.job


def job(src, name: str, params: str = "") -> dict:
    return {"name": name, "framework": "tensorflow", "executes": "train.ipynb", "src_dir": str(src),
            "task_params": params, "tasks": {"worker": {"instances": 2, "memory": "512m"}},
            "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false", "tony.am.retry-count": "0"}}


def test_every_task_runs_the_notebook_with_the_jobs_parameters(tony_home, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    notebook(src / "train.ipynb", ("import os\nsteps = 1", ["parameters"]),
             ("print(f\"{os.environ['TONY_TASK_ID']} of {os.environ['TONY_APPLICATION_ID']} ran {steps} steps\")", []))
    h = TonyClient("local").submit(load_job(job(src, "notebook", "--steps 7")))
    st = h.wait(timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    app_dir = tony_home / "local" / "apps" / h.app_id
    said = {p.parent.name: p.read_text() for p in app_dir.glob("containers/*/stdout")}
    for task in ("worker:0", "worker:1"):
        assert any(f"{task} of {h.app_id} ran 7 steps" in text for text in said.values()), said
    executed = [json.loads(p.read_text()) for p in app_dir.glob("containers/*/train.executed.ipynb")]
    assert len(executed) == 2 and all(nb["cells"][1]["metadata"]["tags"] == ["injected-parameters"] for nb in executed)
    wait_for(lambda: not app_processes(h.app_id), timeout=120)  # the kernels went with their tasks
    kept_with_the_history(h.app_id, {"worker:0", "worker:1"}, "ran 7 steps")


def kept_with_the_history(app_id: str, tasks: set[str], printed: str, backend: str = "local") -> None:
    """Each task's executed notebook is kept with the job's history record and shown from its page:
    as HTML in a sandbox, and as the file itself, with what its cells printed."""
    from starlette.testclient import TestClient

    from tony_workflow.web.access import TokenBook
    from tony_workflow.web.server import create_server

    record = json.loads(run_tony("--backend", backend, "history", app_id, "--json").stdout)
    kept = record["notebooks"]
    assert {n["task"] for n in kept} == tasks and {n["name"] for n in kept} == {"train.executed.ipynb"}, kept
    app = create_server(TonyClient(backend), TokenBook("svc", owner_token="owner-token-0123456789"), index_ttl=0)
    owner = {"authorization": "Bearer owner-token-0123456789"}
    try:
        with TestClient(app) as c:
            page = c.get(f"/jobs/{app_id}", headers=owner)
            assert page.status_code == 200 and f"/jobs/{app_id}/notebooks/worker:0/train.executed.ipynb" in page.text
            shown = c.get(f"/jobs/{app_id}/notebooks/worker:0/train.executed.ipynb", headers=owner)
            assert shown.status_code == 200 and printed in shown.text, shown.text[:300]
            assert shown.headers["content-security-policy"].startswith("sandbox")
            raw = c.get(f"/jobs/{app_id}/notebooks/worker:0/train.executed.ipynb?raw=1", headers=owner).json()
            assert any(printed in "".join(o.get("text", "")) for cell in raw["cells"] for o in cell.get("outputs", []))
            assert c.get(f"/jobs/{app_id}/notebooks/worker:9/train.executed.ipynb", headers=owner).status_code == 404
    finally:
        app.state.pages.keeper.stop()


def test_a_raising_cell_fails_the_job_with_its_traceback(tony_home, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    notebook(src / "train.ipynb", ("print('loading')", []), ("raise RuntimeError('the loss went to nan')", []))
    h = TonyClient("local").submit(load_job(job(src, "notebook-fails")))
    st = h.wait(timeout=300)
    assert st.state == "FAILED"
    tails = h.failed_output(st)
    assert "RuntimeError" in tails and "the loss went to nan" in tails, tails
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_a_file_that_is_no_notebook_is_refused_before_anything_is_submitted(tony_home, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.ipynb").write_text("print('a script, named as a notebook')")
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(load_job(job(src, "not-a-notebook")))
    assert "executes" in str(e.value) and "train.ipynb is not a notebook: not JSON" in str(e.value)
    assert not list((tony_home / "local" / "apps").glob("*"))


def test_without_jupyter_in_the_jobs_python_a_notebook_is_refused_before_anything_is_submitted(tony_home, tmp_path,
                                                                                              monkeypatch):
    import sys
    src = tmp_path / "src"
    src.mkdir()
    notebook(src / "train.ipynb", ("print('hello')", []))
    monkeypatch.setitem(sys.modules, "ipykernel", None)  # as where it is not installed: not to be found
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(load_job(job(src, "no-jupyter")))
    said = str(e.value)
    assert "executes" in said and "needs ipykernel in the job's Python" in said and "tony-workflow[notebook]" in said
    assert not list((tony_home / "local" / "apps").glob("*"))
