"""Which checkpoint a new session resumes from (:mod:`tony_workflow.task.checkpoints`): real
directories in TensorFlow's layout, complete or not, and of other formats."""
from __future__ import annotations

import os

from tony_workflow.task.checkpoints import choose, inspect, replace_with


def tf_checkpoint(d, step: int, complete: bool = True, sub: str = ""):
    here = d / sub if sub else d
    here.mkdir(parents=True, exist_ok=True)
    (here / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n')
    if complete:
        (here / f"ckpt-{step}.index").write_text("i")
        (here / f"ckpt-{step}.data-00000-of-00001").write_text("d")
    return d


def test_a_tensorflow_directory_says_its_step_and_whether_it_is_whole(tmp_path):
    found = inspect(tf_checkpoint(tmp_path / "a", 20))
    assert (found.step, found.complete, found.describe()) == (20, True, "step 20")
    assert not inspect(tf_checkpoint(tmp_path / "b", 30, complete=False)).complete
    # Keras' BackupAndRestore keeps its state file below the top.
    assert inspect(tf_checkpoint(tmp_path / "c", 7, sub="backup/chief")).step == 7


def test_an_empty_directory_holds_nothing_and_another_format_is_judged_by_time(tmp_path):
    (tmp_path / "empty").mkdir()
    assert inspect(tmp_path / "empty") is None and inspect(tmp_path / "missing") is None
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "model.pt").write_text("w")
    found = inspect(tmp_path / "torch")
    assert found.step is None and found.complete and found.describe() == "its newest files"


def test_the_newest_complete_checkpoint_wins_and_the_steps_lost_are_counted(tmp_path):
    store = inspect(tf_checkpoint(tmp_path / "store", 20))
    local = inspect(tf_checkpoint(tmp_path / "local", 30))
    torn = inspect(tf_checkpoint(tmp_path / "torn", 40, complete=False))
    best, lost = choose([store, local, torn])
    assert best == local and lost == 10
    assert choose([store, None]) == (store, 0)
    assert choose([torn]) == (None, 40)        # nothing whole: start over, 40 steps lost
    assert choose([None, None]) == (None, None)


def test_without_steps_the_newest_files_win(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for d, when in ((old, 1000), (new, 2000)):
        d.mkdir()
        (d / "model.pt").write_text(str(when))
        os.utime(d / "model.pt", (when, when))
    assert choose([inspect(new), inspect(old)])[0].path == new


def test_replace_with_copies_the_chosen_directory_over_the_target(tmp_path):
    tf_checkpoint(tmp_path / "src", 5)
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "stale").write_text("x")
    replace_with(tmp_path / "dst", tmp_path / "src")
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["checkpoint", "ckpt-5.data-00000-of-00001",
                                                                     "ckpt-5.index"]
