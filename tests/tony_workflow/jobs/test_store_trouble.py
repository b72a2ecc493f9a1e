"""A checkpoint store that stops taking writes: seen in the status, the events and the CLI, acted on
as ``tony.checkpoint.on-store-failure`` says, and never silently costing progress on a relaunch.

The store is broken the way a full or unmounted disk breaks it for any user, root included: its
directory is replaced by a plain file, so every write under it fails.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import app_processes, run_tony, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.events import read_events
from tony_workflow.task.checkpoints import choose, inspect

pytestmark = pytest.mark.job

# Counts steps into TONY_CHECKPOINT_DIR; fails once, in session 0, when told to.
TRAINER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    ck, marks = Path(os.environ["TONY_CHECKPOINT_DIR"]), Path(os.environ["MARKS"])
    saved = ck / "step"
    start = int(saved.read_text()) if saved.exists() else 0
    session = os.environ["SESSION_ID"]
    (marks / f"session{session}.start").write_text(str(start))
    for step in range(start, int(os.environ.get("STEPS", "60"))):
        if session == "0" and (marks / "fail-now").exists():
            (marks / "failed-at").write_text(str(step))
            sys.exit(3)
        time.sleep(0.1)
        tmp = ck / "step.tmp"
        tmp.write_text(str(step + 1))
        os.replace(tmp, saved)
        (marks / "progress").write_text(str(step + 1))
""")


def _job(tmp_path: Path, store: Path, conf: dict | None = None, steps: int = 60) -> Path:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    (tmp_path / "marks").mkdir(exist_ok=True)
    doc = {"name": "store", "command": f"{sys.executable} {script}", "am": {"memory": "128m"},
           "env": {"MARKS": str(tmp_path / "marks"), "STEPS": str(steps)},
           "tasks": {"worker": {"instances": 1, "memory": "128m"}},
           "conf": {"tony.task.tensorboard.enabled": "false", "tony.checkpoint.location": str(store),
                    "tony.task.heartbeat-interval-ms": 200, **(conf or {})}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _progress(marks: Path) -> int:
    try:
        return int((marks / "progress").read_text())
    except (OSError, ValueError):
        return 0


def _break(store: Path) -> Path:
    """Replaces the store's directory by a file; returns where its contents went."""
    moved = store.with_name(store.name + ".saved")
    store.rename(moved)
    store.write_text("not a directory\n")
    return moved


def _events(handle, name: str) -> list[dict]:
    return [e for e in read_events(handle.backend.app_dir(handle.app_id) / "events.jsonl") if e["event"] == name]


def test_a_failing_store_is_shown_and_a_relaunch_loses_no_progress(tony_home, tmp_path):
    store, marks = tmp_path / "store", tmp_path / "marks"
    handle = TonyClient("local").submit(load_job(str(_job(tmp_path, store, {"tony.am.retry-count": 1}, steps=150))))
    wait_for(lambda: (store / "step").exists() and _progress(marks) >= 5, timeout=120)
    saved = _break(store)
    durable = int((saved / "step").read_text())  # what the store holds from now on

    st = wait_for(lambda: (s := handle.status()).warnings and s, timeout=60)
    assert any("cannot write to the checkpoint store" in w and "worker:0" in w for w in st.warnings), st.warnings
    assert st.state == "RUNNING"  # warn: training goes on
    assert _events(handle, "checkpoint_store_failed")

    # Training goes well past what the store holds; then the session fails and is relaunched.
    wait_for(lambda: _progress(marks) >= durable + 10, timeout=60)
    (marks / "fail-now").touch()
    wait_for(lambda: (marks / "session1.start").exists(), timeout=60)
    failed_at = int((marks / "failed-at").read_text())
    resumed = int((marks / "session1.start").read_text())
    # From the newest checkpoint the task still held on this machine, not from the stale store.
    assert resumed > durable and resumed >= failed_at - 1, (durable, failed_at, resumed)
    restored = _events(handle, "checkpoint_restored")
    assert restored and "local checkpoint" in restored[-1]["source"]

    # The relaunched chief finds the store still broken, and says so; then the store comes back:
    # the warning goes, and the mirror catches up.
    wait_for(lambda: len(_events(handle, "checkpoint_store_failed")) >= 1 and any(
        e["session"] == 1 for e in _events(handle, "task_state") if e.get("state") == "RUNNING"), timeout=60)
    assert handle.status().warnings
    store.unlink()
    saved.rename(store)
    wait_for(lambda: not handle.status().warnings, timeout=60)
    assert _events(handle, "checkpoint_store_recovered")
    final = handle.wait(poll_interval=0.2, timeout=120)
    assert final.state == "SUCCEEDED", final.diagnostics
    assert int((store / "step").read_text()) == 150
    assert not list(store.rglob("*.tony-part"))
    # Each container restored its own copy; the earlier session's is gone once the new one restored.
    app_dir = handle.backend.app_dir(handle.app_id)
    assert len(list(app_dir.glob("containers/*/checkpoint"))) == 1
    assert app_processes(handle.app_id) == []


def test_fail_mode_fails_the_job_with_the_reason(tony_home, tmp_path):
    store, marks = tmp_path / "store", tmp_path / "marks"
    job = _job(tmp_path, store, {"tony.checkpoint.on-store-failure": "fail", "tony.am.retry-count": 2}, steps=600)
    handle = TonyClient("local").submit(load_job(str(job)))
    wait_for(lambda: (store / "step").exists() and _progress(marks) >= 3, timeout=120)
    _break(store)
    st = handle.wait(poll_interval=0.2, timeout=120)
    assert st.state == "FAILED"
    assert "cannot write to the checkpoint store" in st.diagnostics
    assert "tony.checkpoint.on-store-failure=fail" in st.diagnostics
    assert st.session_id == 0  # not retried: the store is still broken
    assert app_processes(handle.app_id) == []


def test_the_cli_prints_the_warning_while_it_follows(tony_home, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be\n")
    r = run_tony("submit", str(_job(tmp_path, blocked / "store", steps=20)), "--wait", "--poll-interval", "0.2")
    assert r.returncode == 0, r.stderr  # warn: the job itself succeeds
    assert "warning: worker:0: cannot write to the checkpoint store" in r.stderr


def test_a_bad_mode_is_refused(tmp_path):
    job = _job(tmp_path, tmp_path / "store", {"tony.checkpoint.on-store-failure": "ignore"})
    r = run_tony("submit", str(job))
    assert r.returncode == 2 and "tony.checkpoint.on-store-failure" in r.stderr and "'warn'" in r.stderr


# -- choosing the checkpoint ------------------------------------------------------------------------

def _tf_dir(root: Path, steps: list[int], newest: int, complete: bool = True) -> Path:
    root.mkdir(parents=True)
    for s in steps:
        (root / f"ckpt-{s}.index").write_text("i")
        (root / f"ckpt-{s}.data-00000-of-00001").write_text("d")
    if not complete:
        (root / f"ckpt-{newest}.index").unlink(missing_ok=True)
    (root / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{newest}"\n'
                                     f'all_model_checkpoint_paths: "ckpt-{newest}"\n')
    return root


def test_the_newest_complete_checkpoint_wins_and_the_loss_is_counted(tmp_path):
    store = inspect(_tf_dir(tmp_path / "store", [5], 5))
    local = inspect(_tf_dir(tmp_path / "c1", [5, 20], 20))
    torn = inspect(_tf_dir(tmp_path / "c2", [5, 20, 25], 25, complete=False))
    assert (store.step, store.complete, torn.complete) == (5, True, False)
    best, lost = choose([store, local, torn])
    assert best is local and lost == 5
    best, lost = choose([store, None])
    assert best is store and lost == 0
    best, lost = choose([torn])  # nothing complete: start over, 25 steps lost
    assert best is None and lost == 25
    assert inspect(tmp_path / "nothing") is None
    # Without a TensorFlow state file the newest files win.
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "model.pt").write_text("old")
    (b / "model.pt").write_text("new")
    os.utime(a / "model.pt", (1, 1))
    best, lost = choose([inspect(a), inspect(b)])
    assert best.path == b and lost is None
    json.dumps(best.describe())


def test_state_files_below_the_top_count_too(tmp_path):
    # Keras' BackupAndRestore keeps its state file in backup/chief/.
    old = inspect(_tf_dir(tmp_path / "a" / "backup" / "chief", [3], 3).parents[1])
    new = inspect(_tf_dir(tmp_path / "b" / "backup" / "chief", [3, 7], 7).parents[1])
    assert (old.step, new.step) == (3, 7)
    best, lost = choose([new, old])
    assert best is new and lost == 0


def test_a_checkpoint_the_trainer_removes_when_done_stays_in_the_store(tmp_path):
    from tony_workflow.storage import open_storage
    from tony_workflow.task.checkpoint_mirror import CheckpointMirror

    local = tmp_path / "local"
    backup = _tf_dir(local / "backup" / "chief", [12], 12)
    mirror = CheckpointMirror(open_storage(str(tmp_path / "store")), "", local)
    mirror.sync()
    stored = tmp_path / "store" / "backup" / "chief"
    assert (stored / "checkpoint").is_file()
    # Done training, the trainer removes its backup; it may still be killed before it exits.
    import shutil
    shutil.rmtree(backup)
    mirror.sync()
    found = inspect(tmp_path / "store")
    assert found is not None and (found.step, found.complete) == (12, True)
    # A newer checkpoint still replaces an older one in the store.
    _tf_dir(local / "backup" / "chief", [13], 13)
    mirror.sync()
    assert inspect(tmp_path / "store").step == 13 and not (stored / "ckpt-12.index").exists()
