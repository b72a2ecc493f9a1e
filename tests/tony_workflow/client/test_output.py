"""Following a job's output (:mod:`tony_workflow.client.output`): whole lines once each, from a
cursor, across sessions, with floods capped. The files here are real files a test writes to as a
task would; the job's status is a plain record of which containers its tasks run in. Real jobs
followed are tests/tony_workflow/jobs/test_output_jobs.py."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tony_workflow.client.output import (
    MAX_LINE,
    SKIP_OVER,
    TAIL_BYTES,
    Cursor,
    OutputFollower,
    Piece,
    default_tasks,
    failed_output,
    last_lines,
    parse_tasks,
    selected,
)


def status(tasks: dict[str, str], session: int = 0, final: bool = False):
    return SimpleNamespace(session_id=session, is_final=final,
                           tasks=[SimpleNamespace(task_id=t, container_id=c, log_url=None) for t, c in tasks.items()])


def reader(root: Path):
    def read(p, offset, limit):
        path = root / p.container / p.stream
        if not path.exists():
            return None
        data = path.read_bytes()
        return data[offset:offset + limit], len(data)
    return read


def write(root: Path, container: str, text: str, stream: str = "stdout") -> None:
    (root / container).mkdir(parents=True, exist_ok=True)
    with (root / container / stream).open("ab") as fh:
        fh.write(text.encode())


def texts(lines) -> list[str]:
    return [line.render() for line in lines]


def test_whole_lines_once_each_and_a_line_being_written_waits_for_its_end(tmp_path):
    f = OutputFollower(reader(tmp_path), tasks=["worker:0"])
    st = status({"worker:0": "c1"})
    assert f.poll(st) == []  # nothing written yet
    write(tmp_path, "c1", "epoch 1 loss=0.9\nepoch 2 lo")
    write(tmp_path, "c1", "a warning\n", "stderr")
    assert texts(f.poll(st)) == ["[worker:0] epoch 1 loss=0.9", "[worker:0 stderr] a warning"]
    assert f.poll(st) == []
    write(tmp_path, "c1", "ss=0.5\nepoch 3 unfinished")
    assert texts(f.poll(st)) == ["[worker:0] epoch 2 loss=0.5"]
    # The job's end: the unfinished last line comes too.
    assert texts(f.poll(status({"worker:0": "c1"}, final=True))) == ["[worker:0] epoch 3 unfinished"]


def test_a_follower_started_again_from_its_cursor_prints_no_line_twice_and_drops_none(tmp_path):
    st = status({"worker:0": "c1"})
    first = OutputFollower(reader(tmp_path), tasks=["worker:0"])
    write(tmp_path, "c1", "one\ntwo\nthr")
    assert texts(first.poll(st)) == ["[worker:0] one", "[worker:0] two"]
    kept = first.cursor.to_json()  # what a reattaching retry finds
    write(tmp_path, "c1", "ee\nfour\n")
    again = OutputFollower(reader(tmp_path), tasks=["worker:0"], cursor=Cursor.from_json(kept))
    assert texts(again.poll(st)) == ["[worker:0] three", "[worker:0] four"]


def test_of_two_records_of_one_follower_it_goes_on_from_the_further(tmp_path):
    # Where the task deferred, and how far its trigger got before its triggerer stopped.
    st = status({"worker:0": "c1"})
    f = OutputFollower(reader(tmp_path), tasks=["worker:0"])
    write(tmp_path, "c1", "one\ntwo\n")
    assert texts(f.poll(st)) == ["[worker:0] one", "[worker:0] two"]
    deferred = Cursor.from_json(f.cursor.to_json())
    write(tmp_path, "c1", "three\n", "stderr")
    write(tmp_path, "c1", "four\n")
    assert texts(f.poll(st)) == ["[worker:0] four", "[worker:0 stderr] three"]
    further = Cursor.from_json(f.cursor.to_json())
    write(tmp_path, "c1", "five\n")
    # Either order of the two records gives the further, and a follower goes on from there.
    assert deferred.furthest(further).to_json() == further.furthest(deferred).to_json() == further.to_json()
    again = OutputFollower(reader(tmp_path), tasks=["worker:0"], cursor=deferred.furthest(further))
    assert texts(again.poll(st)) == ["[worker:0] five"]
    # With no second record, from the first.
    alone = OutputFollower(reader(tmp_path), tasks=["worker:0"], cursor=deferred.furthest(None))
    assert texts(alone.poll(st)) == ["[worker:0] four", "[worker:0] five", "[worker:0 stderr] three"]


def test_a_relaunched_session_is_marked_after_the_old_containers_last_lines(tmp_path):
    f = OutputFollower(reader(tmp_path), tasks=["worker:0"])
    write(tmp_path, "c1", "step 1\n")
    assert texts(f.poll(status({"worker:0": "c1"}))) == ["[worker:0] step 1"]
    # Between two polls the container died (its last line unfinished) and the session was relaunched.
    write(tmp_path, "c1", "Traceback (most recent call last)\nKilled")
    write(tmp_path, "c2", "restored step 1\n")
    cursor = f.cursor.to_json()
    expected = ["[worker:0] Traceback (most recent call last)", "[worker:0] Killed", "--- session 1 ---",
                "[worker:0] restored step 1"]
    assert texts(f.poll(status({"worker:0": "c2"}, session=1))) == expected
    # A follower started again from before the relaunch reads the old container's end as well.
    again = OutputFollower(reader(tmp_path), tasks=["worker:0"], cursor=Cursor.from_json(cursor))
    assert texts(again.poll(status({"worker:0": "c2"}, session=1))) == expected


def test_the_chief_is_followed_by_default_else_the_first_worker():
    assert default_tasks(status({"worker:0": "a", "chief:0": "b", "ps:0": "c"})) == ["chief:0"]
    assert default_tasks(status({"ps:0": "c", "worker:0": "a", "worker:1": "d"})) == ["worker:0"]


def test_a_flood_is_capped_said_and_a_file_far_ahead_is_read_from_near_its_end(tmp_path):
    now = [0.0]
    f = OutputFollower(reader(tmp_path), tasks=["worker:0"], rate=10, burst=20, clock=lambda: now[0])
    st = status({"worker:0": "c1"})
    write(tmp_path, "c1", "".join(f"line {i}\n" for i in range(100)))
    # Twenty may pass at once: the latest, as tail shows them, after the count of those before.
    got = texts(f.poll(st))
    assert got == ["[80 lines left out: more than 10 a second]", *(f"[worker:0] line {i}" for i in range(80, 100))]
    write(tmp_path, "c1", "now\n")
    assert f.poll(st) == []  # none may pass until time goes by
    now[0] += 1.0  # ten more may pass
    write(tmp_path, "c1", "after\n")
    assert texts(f.poll(st)) == ["[1 line left out: more than 10 a second]", "[worker:0] after"]
    # A task that wrote far more than is read at one look: the follower skips to near the end.
    big = "x" * 99 + "\n"
    write(tmp_path, "c1", big * (SKIP_OVER // 100 + 100) + "last\n")
    now[0] += 100.0
    got = texts(f.poll(st))
    assert got[0].startswith("[worker:0 stdout: ") and got[0].endswith(" bytes left out]"), got[:2]
    assert got[-1] == "[worker:0] last" and len(got) <= 22
    left = int(got[0].split(": ")[1].split()[0])
    assert left > SKIP_OVER - (1 << 20)


def test_a_line_longer_than_the_limit_is_cut_and_the_next_lines_follow(tmp_path):
    f = OutputFollower(reader(tmp_path), tasks=["worker:0"])
    write(tmp_path, "c1", "y" * (MAX_LINE + 500) + "\nnext\n")
    got = texts(f.poll(status({"worker:0": "c1"})))
    assert got == ["[worker:0] " + "y" * MAX_LINE + " [line cut]", "[worker:0] next"]


def test_tasks_are_named_by_id_or_type_and_none_or_chief_are_words():
    assert parse_tasks(None) is None and parse_tasks("") is None and parse_tasks("chief") is None
    assert parse_tasks("none") == [] and parse_tasks([]) == []
    assert parse_tasks(" worker:1, ps ") == ["worker:1", "ps"] and parse_tasks(["worker:0,worker:2"]) == [
        "worker:0", "worker:2"]
    st = status({"chief:0": "c0", "worker:0": "c1", "worker:1": "c2", "ps:0": "c3"})
    assert selected(st, None) == ["chief:0"]
    assert selected(st, ["worker", "ps:0", "worker:1", "evaluator"]) == ["worker:0", "worker:1", "ps:0"]


def test_every_followed_type_task_is_read_in_the_order_named(tmp_path):
    f = OutputFollower(reader(tmp_path), tasks=["ps", "worker"])
    for container, said in (("c1", "w0"), ("c2", "w1"), ("c3", "p0")):
        write(tmp_path, container, f"{said}\n")
    lines = texts(f.poll(status({"worker:0": "c1", "worker:1": "c2", "ps:0": "c3"})))
    assert lines == ["[ps:0] p0", "[worker:0] w0", "[worker:1] w1"]


def failed_status(final: bool = True):
    st = status({"worker:0": "c1", "worker:1": "c2"}, final=final)
    st.tasks[0].state, st.tasks[0].exit_code = "SUCCEEDED", 0
    st.tasks[1].state, st.tasks[1].exit_code = "FAILED", 1
    return st


def test_a_failed_tasks_last_lines_of_each_stream_with_its_whole_traceback(tmp_path):
    write(tmp_path, "c1", "fine\n")
    write(tmp_path, "c2", "".join(f"step {i}\n" for i in range(200)) + "no end of line")
    write(tmp_path, "c2", "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: NaN\n", "stderr")
    block = failed_output(failed_status(), reader(tmp_path), n=5)
    assert block.splitlines() == [
        "--- worker:1 stdout (FAILED, exit code 1), its last 5 lines:",
        "step 196", "step 197", "step 198", "step 199", "no end of line",
        "--- worker:1 stderr (FAILED, exit code 1), its last 3 lines:",
        "Traceback (most recent call last):", '  File "train.py", line 3', "ValueError: NaN"]
    assert "fine" not in block  # worker:0 succeeded


def test_the_last_lines_of_a_big_file_are_read_from_its_end_only(tmp_path):
    write(tmp_path, "c2", "x" * (5 << 20) + "\nlast one\n")
    asked = []
    read = reader(tmp_path)

    def counting(p, offset, limit):
        asked.append((offset, limit))
        return read(p, offset, limit)
    assert last_lines(counting, Piece("worker:1", 0, "c2", "stdout"), 3) == ["last one"]
    assert all(limit <= TAIL_BYTES for _, limit in asked)


def test_an_ended_jobs_files_not_there_yet_are_waited_for_then_given_up(tmp_path):
    f = OutputFollower(reader(tmp_path), tasks=["worker:1"])
    clock = [0.0]

    def sleep(s):  # the files come (aggregated) after a few seconds
        clock[0] += s
        if clock[0] >= 4:
            write(tmp_path, "c2", "at last\n")
            write(tmp_path, "c2", "", "stderr")
    assert texts(f.drain(failed_status(), sleep=sleep, clock=lambda: clock[0])) == ["[worker:1] at last"]
    assert not f.pending and 4 <= clock[0] < 10
    g = OutputFollower(reader(tmp_path / "never"), tasks=["worker:1"])
    clock[0] = 0.0
    assert g.drain(failed_status(), wait_s=30, sleep=lambda s: clock.__setitem__(0, clock[0] + s),
                   clock=lambda: clock[0]) == []
    assert 30 <= clock[0] <= 32  # no longer than it was told


def test_a_node_refusing_a_file_is_said_once_and_its_lines_come_when_it_answers(tmp_path):
    from tony_workflow.errors import OutputRefused
    refusing = [True]
    read = reader(tmp_path)

    def node(p, offset, limit):
        if refusing[0]:
            raise OutputRefused("its NodeManager at nm:8042 answered HTTP 500 (MESSAGE: Request failed.)")
        return read(p, offset, limit)
    f = OutputFollower(node, tasks=["worker:0"])
    write(tmp_path, "c1", "one\n")
    st = status({"worker:0": "c1"})
    said = texts(f.poll(st))
    why = "cannot be read now: its NodeManager at nm:8042 answered HTTP 500 (MESSAGE: Request failed.); asked again"
    assert said == [f"[worker:0 stdout: {why}]", f"[worker:0 stderr: {why}]"]
    assert f.poll(st) == []  # said once
    refusing[0] = False
    assert texts(f.poll(st)) == ["[worker:0] one"]


def test_a_container_named_before_its_log_link_is_read_where_the_link_later_says(tmp_path):
    # YARN names a task's container as it grants it and links its logs once it runs on a node: a
    # follower that saw the container first must not keep looking for it nowhere.
    write(tmp_path / "node", "c1", "one\n")
    where = str(tmp_path / "node")

    def at(p, offset, limit):
        if p.where is None:
            return None  # no link yet: nowhere to read
        return reader(Path(p.where))(p, offset, limit)
    f = OutputFollower(at, tasks=["worker:0"])
    before = status({"worker:0": "c1"})
    assert f.poll(before) == []
    linked = status({"worker:0": "c1"})
    linked.tasks[0].log_url = where
    assert texts(f.poll(linked)) == ["[worker:0] one"]
    assert f.cursor.open_files["c1/stdout"][2] == where  # a follower started again reads there too


def test_between_two_status_reads_the_output_is_looked_at_every_interval_but_not_just_before_the_next():
    from tony_workflow.client.output import StatusGap
    now = [100.0]
    gap = StatusGap(2.5, 1.0, clock=lambda: now[0])
    looks = []
    while (pause := gap.pause()) is not None:
        now[0] += pause
        looks.append((round(now[0] - 100.0, 2), gap.look()))
    # At 1 s and 2 s; at 2.5 s the status is read, which looks itself.
    assert looks == [(1.0, True), (2.0, True), (2.5, False)]
