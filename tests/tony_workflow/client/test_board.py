"""``tony tensorboard``'s parts (:mod:`tony_workflow.client.board`); the command run for real over a
finished job's kept event files is test_history.py's."""
from __future__ import annotations

import pytest

from tony_workflow.web.boards import free_port


@pytest.mark.yarn
def test_a_yarn_chiefs_event_files_are_kept_in_hdfs_and_served_after_the_end(yarn_cluster, tmp_path):
    import json
    import os
    import subprocess
    import sys
    import urllib.request

    from tests.conftest import REPO, TENSORBOARD_EVENTS, run_tony, stopped, wait_for

    src = tmp_path / "src"
    src.mkdir()
    (src / "writer.py").write_text(TENSORBOARD_EVENTS)
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"name": "board", "framework": "standalone", "src_dir": str(src), "executes": "writer.py",
                                "tasks": {"worker": {"instances": 1, "memory": "512m", "vcores": 1}},
                                "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}}))
    done = run_tony("--backend", "yarn", "submit", str(spec), "--wait", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    app_id = done.stdout.split()[-2]
    record = json.loads(run_tony("--backend", "yarn", "history", app_id, "--json").stdout)
    kept = record["tensorboard_logs"]
    assert kept["files"] == 1 and kept["uri"].startswith("hdfs://") and kept["uri"].endswith(f"{app_id}/tensorboard")
    port = free_port(0)
    board = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "tensorboard",
                              app_id, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        url = board.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}/", board.stderr.read() if board.poll() is not None else url

        def scalars():
            with urllib.request.urlopen(f"{url}data/plugin/scalars/scalars?tag=loss&run=.", timeout=10) as r:
                return json.loads(r.read())
        points = wait_for(lambda: len(s := scalars()) == 5 and s, timeout=60, interval=0.5)
        assert [p[1] for p in points] == [1, 2, 3, 4, 5]
        assert any(p.name.startswith("tony-tensorboard-") for p in tmp_path.iterdir())  # copied out of HDFS ...
    finally:
        assert stopped(board) == 0
    assert not any(p.name.startswith("tony-tensorboard-") for p in tmp_path.iterdir())  # ... and gone with it
    # The history server serves the same kept files from HDFS, through its own route and token.
    serve = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "history", "serve",
                              "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        import requests
        link = serve.stdout.readline().strip()
        assert link.startswith("http://localhost:"), serve.stderr.read() if serve.poll() is not None else link
        base, token = link.split("/?token=")
        owner = {"Authorization": f"Bearer {token}"}
        page = requests.get(f"{base}/jobs/{app_id}", headers=owner, timeout=60)
        assert page.status_code == 200 and 'id="tensorboard"' in page.text and "hdfs://" in record["tensorboard_logs"]["uri"]
        points = wait_for(lambda: (r := requests.get(f"{base}/jobs/{app_id}/tensorboard/data/plugin/scalars/scalars",
                                                     params={"tag": "loss", "run": "."}, headers=owner, timeout=60))
                          .status_code == 200 and len(r.json()) == 5 and r.json(), timeout=120, interval=1)
        assert [p[1] for p in points] == [1, 2, 3, 4, 5]
        assert any(p.name.startswith("tony-board-") for p in tmp_path.iterdir())  # copied out of HDFS ...
    finally:
        assert stopped(serve) == 0
    assert not any(p.name.startswith("tony-board-") for p in tmp_path.iterdir())  # ... and gone with it
