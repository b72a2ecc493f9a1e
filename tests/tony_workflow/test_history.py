"""The job history: records written as jobs end, in TonY's layout, listed and shown by ``tony history``."""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import TENSORBOARD_EVENTS, run_tony
from tests.tony_workflow.jobs.test_runtime import submit
from tony_workflow.history import (
    JobHistory,
    SubmitterHistory,
    build_record,
    parse_record_name,
    record_name,
    sizing_hints,
)
from tony_workflow.spec.errors import HIDDEN, mask_secrets
from tony_workflow.storage import LocalStorage

T0 = 1_763_900_000.0  # 2025-11-23 12:13:20 UTC


def status(app_id="application_1763900000000_0001", state="SUCCEEDED", started=T0, finished=T0 + 90):
    return {"application_id": app_id, "name": "demo", "state": state, "started_at": started, "finished_at": finished,
            "backend": "local", "am_attempt": 1, "diagnostics": "",
            "tasks": [{"type": "worker", "index": 0, "state": "SUCCEEDED", "exit_code": 0, "log_url": "/logs/w0",
                       "metrics": {"rss_mb": 700.0, "max_rss_mb": 900.0}},
                      {"type": "worker", "index": 1, "state": "SUCCEEDED", "exit_code": 0, "log_url": "/logs/w1"}]}


EVENTS = [
    {"ts": T0 + 1, "event": "am_started", "attempt": 1},
    {"ts": T0 + 2, "event": "session_started", "session": 0},
    {"ts": T0 + 3, "event": "task_state", "task": "worker:0", "session": 0, "state": "LAUNCHED"},
    {"ts": T0 + 3, "event": "task_state", "task": "worker:1", "session": 0, "state": "LAUNCHED"},
    {"ts": T0 + 30, "event": "task_state", "task": "worker:1", "session": 0, "state": "FAILED", "exit_code": 137,
     "diagnostics": "killed", "metrics": {"rss_mb": 1500.0, "max_rss_mb": 1800.0, "cpu_percent": 99.0}},
    {"ts": T0 + 31, "event": "session_finished", "session": 0, "state": "FAILED", "diagnostics": "worker:1 failed"},
    {"ts": T0 + 32, "event": "session_started", "session": 1},
    {"ts": T0 + 33, "event": "task_state", "task": "worker:0", "session": 1, "state": "LAUNCHED"},
    {"ts": T0 + 33, "event": "task_state", "task": "worker:1", "session": 1, "state": "LAUNCHED"},
    {"ts": T0 + 80, "event": "task_state", "task": "worker:1", "session": 1, "state": "SUCCEEDED", "exit_code": 0,
     "metrics": {"rss_mb": 600.0, "max_rss_mb": 700.0, "cpu_percent": 50.0}},
    {"ts": T0 + 89, "event": "session_finished", "session": 1, "state": "SUCCEEDED", "diagnostics": ""},
]
REQUESTED = {"worker": {"memory_mb": 8192, "vcores": 1, "gpus": 0}}


def test_a_record_tells_the_sessions_the_restarts_and_the_peak_use_of_each_task():
    r = build_record(status(), EVENTS, user="alice", conf={"tony.worker.instances": "2"}, requested=REQUESTED)
    assert [s["state"] for s in r["sessions"]] == ["FAILED", "SUCCEEDED"]
    tasks = {t["task_id"]: t for t in r["tasks"]}
    assert tasks["worker:1"]["restarts"] == 1 and tasks["worker:0"]["restarts"] == 1
    # The peak over both sessions, not the last session's.
    assert tasks["worker:1"]["metrics"]["max_rss_mb"] == 1800.0 and tasks["worker:1"]["state"] == "SUCCEEDED"
    assert tasks["worker:0"]["metrics"]["max_rss_mb"] == 900.0, "from the final status when no event had figures"
    assert tasks["worker:0"]["log"] == "/logs/w0"
    whats = [item["what"] for item in r["timeline"]]
    assert whats[:2] == ["ApplicationMaster attempt 1 started", "session 0 started"]
    assert "task worker:1 FAILED (exit 137)" in whats and "session 0 ended FAILED" in whats
    assert r["hints"] == ["worker asked for 8.0 GiB, used at most 1.8 GiB: tony.worker.memory could be lower"]


def test_a_tasks_run_is_timed_by_its_own_host_where_its_executor_said_when():
    # The AM hears that a process started and ended later than it did, by a varying delay (its
    # lock, the network): the executor's own stamps, taken before the spawn and after the end, are
    # what the record shows; an event without them (an older executor) keeps the AM's time.
    events = [*EVENTS[:9],
              {"ts": T0 + 36, "event": "task_state", "task": "worker:0", "session": 1, "state": "RUNNING",
               "at": T0 + 34.5},
              {"ts": T0 + 36, "event": "task_state", "task": "worker:1", "session": 1, "state": "RUNNING"},
              {"ts": T0 + 80, "event": "task_state", "task": "worker:0", "session": 1, "state": "SUCCEEDED",
               "exit_code": 0, "at": T0 + 79.25},
              *EVENTS[9:]]
    tasks = {t["task_id"]: t for t in build_record(status(), events, user="alice", conf={}, requested=REQUESTED)["tasks"]}
    assert (tasks["worker:0"]["started_at"], tasks["worker:0"]["finished_at"]) == (T0 + 34.5, T0 + 79.25)
    assert (tasks["worker:1"]["started_at"], tasks["worker:1"]["finished_at"]) == (T0 + 36, T0 + 80)


def test_a_job_that_waited_at_the_gate_shows_when_its_turn_came_before_its_am_started():
    events = [{**EVENTS[0], "admitted": T0 + 0.4}, *EVENTS[1:]]
    timeline = build_record(status(), events, user="alice", conf={}, requested=REQUESTED)["timeline"]
    assert [(t["ts"], t["what"]) for t in timeline[:2]] == [
        (T0 + 0.4, "its turn came: its ApplicationMaster's container and its gang were asked for"),
        (T0 + 1, "ApplicationMaster attempt 1 started")]


def test_a_job_whose_am_waited_first_in_line_shows_its_turn_after_its_am_started():
    events = [EVENTS[0], {"ts": T0 + 1.5, "event": "turn_came"}, *EVENTS[1:]]
    timeline = build_record(status(), events, user="alice", conf={}, requested=REQUESTED)["timeline"]
    assert [(t["ts"], t["what"]) for t in timeline[:2]] == [
        (T0 + 1, "ApplicationMaster attempt 1 started"),
        (T0 + 1.5, "its turn came: its gang was asked for (its ApplicationMaster had started first in line)")]
    events = [EVENTS[0], {"ts": T0 + 1.5, "event": "turn_came", "place": "next"}, *EVENTS[1:]]
    timeline = build_record(status(), events, user="alice", conf={}, requested=REQUESTED)["timeline"]
    assert timeline[1]["what"] == "its turn came: its gang was asked for (its ApplicationMaster had started next in line)"


def test_sizing_hints_name_tight_memory_and_idle_gpus():
    tasks = [{"task_id": "worker:0", "metrics": {"max_rss_mb": 1950.0, "gpu_util_percent": 12.0}}]
    hints = sizing_hints(tasks, {"worker": {"memory_mb": 2048, "gpus": 1}})
    assert any("close to the limit" in h and "tony.worker.memory" in h for h in hints)
    assert any("utilisation was at most 12 %" in h for h in hints)
    assert sizing_hints(tasks, {"worker": {"memory_mb": 2500, "gpus": 0}}) == [], "well sized: nothing to say"


def test_a_task_over_its_memory_is_said_to_have_exceeded_it_not_to_be_close():
    over = [{"task_id": "worker:0", "metrics": {"max_rss_mb": 2300.0}}]
    assert sizing_hints(over, {"worker": {"memory_mb": 2048}}) == [
        "worker used 2.2 GiB, more than its 2.0 GiB: it exceeded its memory; raise tony.worker.memory"]
    # Killed by the cluster (YARN's -104) before a sample saw the peak: exceeded all the same.
    killed = [{"task_id": "worker:1", "exit_code": -104, "metrics": {"max_rss_mb": 1500.0}}]
    assert sizing_hints(killed, {"worker": {"memory_mb": 2048}}) == [
        "worker went beyond its 2.0 GiB: it exceeded its memory and the cluster killed it; raise tony.worker.memory"]


def test_records_are_kept_in_tonys_layout_and_found_by_state_and_time(tmp_path):
    history = JobHistory(LocalStorage(tmp_path), retention_s=0)
    for n, (state, started) in enumerate([("SUCCEEDED", T0), ("FAILED", T0 + 100), ("KILLED", T0 + 86400 * 3)], 1):
        app = f"application_1763900000000_000{n}"
        st = status(app, state, started, started + 60)
        history.write(build_record(st, [], user="bob", conf={}, requested={}))
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert "finished/2025/11/23/application_1763900000000_0001/config.json" in files
    assert f"finished/2025/11/23/application_1763900000000_0001/{record_name({'application_id': 'application_1763900000000_0001', 'started_at': T0, 'finished_at': T0 + 60, 'user': 'bob', 'state': 'SUCCEEDED'})}" in files
    assert any(f.startswith("finished/2025/11/26/application_1763900000000_0003/") for f in files)
    assert [r["state"] for r in history.list()] == ["KILLED", "FAILED", "SUCCEEDED"], "newest first"
    assert [r["application_id"] for r in history.list(state="failed")] == ["application_1763900000000_0002"]
    assert len(history.list(since=T0 + 50)) == 2 and len(history.list(limit=1)) == 1
    assert history.get("application_1763900000000_0002")["user"] == "bob"
    assert history.get("application_1763900000000_0009") is None
    # An attempt that died as the job went on left a record; the one of the latest end is the job's.
    app = "application_1763900000000_0004"
    history.write(build_record(status(app, "FAILED", T0, T0 + 30), [], user="bob", conf={}, requested={}))
    history.write(build_record(status(app, "SUCCEEDED", T0, T0 + 90), [], user="bob", conf={}, requested={}))
    assert history.get(app)["state"] == "SUCCEEDED"


def test_old_records_are_purged_when_a_new_one_is_written(tmp_path):
    history = JobHistory(LocalStorage(tmp_path), retention_s=30 * 86400)
    old = status("application_1763900000000_0001", finished=time.time() - 31 * 86400)
    history.write(build_record(old, [], user="u", conf={}, requested={}))  # written, then outlived its retention
    new = status("application_1763900000000_0002", finished=time.time())
    history.write(build_record(new, [], user="u", conf={}, requested={}))
    assert [r["application_id"] for r in history.list()] == ["application_1763900000000_0002"]
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and "_0001" in str(p)], "its config and events too"


def test_a_submitter_reads_the_jobs_it_ran_as_others_in_their_history_and_nothing_else_of_theirs(tmp_path):
    own = JobHistory(LocalStorage(tmp_path / "svc"), retention_s=0)
    theirs = JobHistory(LocalStorage(tmp_path / "alice"), retention_s=0)

    def record(n, user, submitter, finished):
        r = build_record(status(f"application_1763900000000_000{n}", finished=finished), [], user=user, conf={},
                         requested={})
        return {**r, "submitter": submitter}

    own.write(record(1, "svc", "svc", T0 + 10))
    theirs.write(record(2, "alice", "svc", T0 + 30))     # svc submitted it to run as alice
    theirs.write(record(3, "alice", "alice", T0 + 20))   # alice's own job
    theirs.write(record(4, "alice", "mallory", T0 + 40))  # somebody else's, run as alice
    own.note_proxied("alice")
    own.note_proxied("alice")
    assert own.proxied_users() == ["alice"] and theirs.proxied_users() == []
    assert [r["application_id"] for r in own.list()] == ["application_1763900000000_0001"], "marks are no records"

    joint = SubmitterHistory(own, [("alice", theirs)], "svc")
    assert [r["application_id"] for r in joint.list()] == ["application_1763900000000_0002",
                                                           "application_1763900000000_0001"], "newest first"
    assert [r["application_id"] for r in joint.list(limit=1)] == ["application_1763900000000_0002"]
    assert joint.get("application_1763900000000_0002")["user"] == "alice"
    assert joint.get("application_1763900000000_0001")["user"] == "svc"
    assert joint.get("application_1763900000000_0003") is None and joint.get("application_1763900000000_0004") is None
    with pytest.raises(ValueError, match="not a user name"):
        own.note_proxied("../etc")


def test_record_names_round_trip_and_secrets_stay_out_of_the_kept_configuration():
    meta = {"application_id": "application_1_0002", "started_at": 1.5, "finished_at": 2.25, "user": "a-b",
            "state": "FAILED"}
    assert parse_record_name(record_name(meta)) == meta
    assert parse_record_name("notes.txt") is None
    masked = mask_secrets({"tony.secret.key": "s3cr3t", "tony.containers.envs": "A=1,DB_PASSWORD=hunter2",
                           "tony.worker.instances": "2"})
    assert masked == {"tony.secret.key": HIDDEN, "tony.containers.envs": f"A=1,DB_PASSWORD={HIDDEN}",
                      "tony.worker.instances": "2"}


@pytest.mark.job
def test_tony_history_lists_and_shows_a_finished_job(tony_home, tmp_path):
    cmd = ("python -c \"from tony_workflow import report; import time\n"
           "for s in range(1, 11): report(step=s, total=10, loss=1.0/s); time.sleep(0.3)\"")
    h = submit(tmp_path, cmd, {"worker": {"instances": 2, "memory": "2g"}},
               conf={"tony.task.metrics-interval-ms": 200, "tony.containers.envs": "API_TOKEN=abc"})
    assert h.wait(poll_interval=0.2, timeout=120).state == "SUCCEEDED"
    out = run_tony("history", "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert [r["application_id"] for r in listed] == [h.app_id]
    job = listed[0]
    assert job["state"] == "SUCCEEDED" and job["name"] == "rt" and job["user"] and job["finished_at"] >= job["started_at"]
    assert [t["task_id"] for t in job["tasks"]] == ["worker:0", "worker:1"]
    assert all(t["exit_code"] == 0 and t["restarts"] == 0 and t["metrics"]["max_rss_mb"] > 0 for t in job["tasks"])

    shown = run_tony("history", h.app_id)
    assert shown.returncode == 0, shown.stderr
    assert "session 0 started" in shown.stdout and "worker:1" in shown.stdout
    assert "advice [moderate] memory: worker asked for 2.0 GiB and used at most" in shown.stdout
    assert "hint:" not in shown.stdout  # the advice says it, with the key to set
    assert "progress: step=10/10" in shown.stdout
    assert re.search(r"\n  loss: [0-9.]+ first, [0-9.]+ to [0-9.]+, [0-9.]+ last \(\d+ points\)\n", shown.stdout), shown.stdout
    record = json.loads(run_tony("history", h.app_id, "--json").stdout)
    assert record["conf"]["tony.containers.envs"] == f"API_TOKEN={HIDDEN}"
    assert record["series"]["t"] and set(record["series"]["tasks"]) == {"worker:0", "worker:1"}
    loss = [v for v in record["series"]["metrics"]["loss"] if v is not None]  # the training curve, kept
    assert loss and loss[-1] <= loss[0] and len(record["series"]["metrics"]["loss"]) == len(record["series"]["t"])
    assert h.record()["application_id"] == h.app_id, "once the AM is gone, the handle reads the history"

    # The history outlives the job's own directory.
    assert run_tony("clean", h.app_id).returncode == 0
    assert json.loads(run_tony("history", "--json", "--state", "succeeded").stdout)[0]["application_id"] == h.app_id
    assert json.loads(run_tony("history", "--json", "--state", "FAILED").stdout) == []
    assert json.loads(run_tony("history", "--json", "--since", "2999-01-01").stdout) == []
    assert len(json.loads(run_tony("history", "--json", "--since", "1h").stdout)) == 1


@pytest.mark.parametrize("args, message, code", [
    (["--since", "yesterday"], "--since: 'yesterday' is neither a duration", 2),
    (["--limit", "0"], "--limit must be at least 1", 2),
    (["application_1_x"], "not an application id", 2),
    (["application_1763900000000_0404"], "no history of application_1763900000000_0404", 3),  # not found
])
@pytest.mark.job
def test_tony_history_refuses_bad_arguments_clearly(tony_home, args, message, code):
    out = run_tony("history", *args)
    assert out.returncode == code and message in out.stderr and "Traceback" not in out.stderr, out.stderr




@pytest.mark.job
def test_a_finished_jobs_tensorboard_comes_back_from_its_history(tony_home, tmp_path):
    import subprocess
    import sys
    import urllib.request

    import psutil

    from tests.conftest import REPO, stopped, wait_for

    (tmp_path / "writer.py").write_text(TENSORBOARD_EVENTS)
    h = submit(tmp_path, f"python {tmp_path}/writer.py $JOB_NAME$TASK_INDEX", {"worker": {"instances": 2, "memory": "1g"}},
               conf={"tony.task.tensorboard.enabled": "false"})
    assert h.wait(poll_interval=0.2, timeout=120).state == "SUCCEEDED"
    record = json.loads(run_tony("history", h.app_id, "--json").stdout)
    kept = record["tensorboard_logs"]
    assert kept["files"] == 2 and kept["bytes"] > 0 and kept["uri"].endswith(f"{h.app_id}/tensorboard")
    shown = run_tony("history", h.app_id).stdout
    assert f"TensorBoard: tony tensorboard {h.app_id}  (2 event file(s) kept in {kept['uri']})" in shown
    served = run_tony("history", h.app_id, env={"TONY_HISTORY_SERVER": "http://hs.example.com:19886"}).stdout
    assert f"page: http://hs.example.com:19886/jobs/{h.app_id}" in served
    assert f"TensorBoard: http://hs.example.com:19886/jobs/{h.app_id}/tensorboard/" in served
    assert run_tony("clean", h.app_id).returncode == 0  # the job's own directory is gone: the history serves
    port = _free_port()
    board = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "tensorboard", h.app_id, "--port",
                              str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    server: list = []
    try:
        url = board.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}/", board.stderr.read() if board.poll() is not None else url

        def scalars(run: str) -> list:
            with urllib.request.urlopen(f"{url}data/plugin/scalars/scalars?tag=loss&run={run}", timeout=10) as r:
                return json.loads(r.read())

        runs = wait_for(lambda: (r := json.loads(urllib.request.urlopen(f"{url}data/runs", timeout=10).read()))
                        and len(r) == 2 and r, timeout=60, interval=0.5)
        assert sorted(runs) == ["worker0", "worker1"]
        points = wait_for(lambda: len(s := scalars("worker1")) == 5 and s, timeout=60, interval=0.5)
        assert [p[1] for p in points] == [1, 2, 3, 4, 5] and points[-1][2] == pytest.approx(0.2)
        server = psutil.Process(board.pid).children(recursive=True)
        assert server, "TensorBoard runs as the command's child"
    finally:
        assert stopped(board) == 0
    wait_for(lambda: not any(c.is_running() and c.status() != "zombie" for c in server), timeout=30)  # it went too
    # A command killed outright takes its TensorBoard with it too.
    board = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "tensorboard", h.app_id, "--port",
                              str(_free_port())], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    assert board.stdout.readline().startswith("http://127.0.0.1:")
    server = psutil.Process(board.pid).children(recursive=True)
    board.kill()
    board.wait(30)
    wait_for(lambda: not any(c.is_running() and c.status() != "zombie" for c in server), timeout=30)
    unknown = run_tony("tensorboard", "application_1_0009")
    assert unknown.returncode == 3 and "no history of application_1_0009" in unknown.stderr


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
