"""The job pages' parts (:mod:`tony_workflow.web.pages`): a job's figures over time drawn as SVG
geometry, with gaps where a figure is missing, and the templates over records. The pages served
for real are test_server.py's, and in Airflow's api-server test_plugin.py's and test_ui.py's."""
from __future__ import annotations

from tony_workflow.web.index import Page
from tony_workflow.web.pages import chart, charts, render


def test_a_chart_scales_its_lines_into_the_box_and_breaks_them_at_gaps():
    c = chart("Memory", [0.0, 10.0, 20.0, 30.0], {"worker:0": [100.0, None, 50.0, 100.0]}, "MiB",
              width=100, height=80)
    assert c["top"] == 110.0 and c["seconds"] == 30 and c["unit"] == "MiB"
    [series] = c["series"]
    first, second = series["segments"]
    assert first == f"36.0,{80 - 20 - 100 / 110 * 50:.1f}"  # one point, then the gap
    xs = [float(p.split(",")[0]) for p in second.split()]
    assert xs == sorted(xs) and xs[-1] == 92.0  # the last time at the right edge


def test_nothing_to_draw_is_no_chart():
    assert chart("Step", [0.0], {"step": [1.0]}, "step") is None
    assert chart("GPU", [0.0, 1.0], {"worker:0": [None, None]}, "%") is None
    assert charts(None) == [] and charts({"t": [1.0]}) == []


def test_a_jobs_series_gives_one_chart_per_figure_it_has():
    series = {"t": [0.0, 5.0], "step": [0, 50],
              "tasks": {"worker:0": {"rss_mb": [10.0, 20.0], "cpu_percent": [50.0, 80.0],
                                     "gpu_util_percent": [None, None], "gpu_mem_mb": [None, None]}}}
    assert [c["title"] for c in charts(series)] == ["Training step", "Memory (RSS)", "CPU"]
    series["metrics"] = {"loss": [2.3, 0.4], "accuracy": [None, None]}  # accuracy never reported: no chart
    assert [c["title"] for c in charts(series)][-1] == "Training: loss"
    assert len(charts(series)) == 4


def test_a_curve_below_zero_keeps_its_axis_from_its_lowest_value():
    c = chart("Training: margin", [0.0, 1.0, 2.0], {"margin": [-2.0, 0.0, 2.0]}, "as reported", width=100, height=80)
    assert c["bottom"] == -2.2 and c["top"] == 2.2
    ys = [float(p.split(",")[1]) for p in c["series"][0]["segments"][0].split()]
    assert ys == [57.7, 35.0, 12.3]  # zero midway between the axis ends, 10 % of room below and above
    small = chart("Training: loss", [0.0, 1.0], {"loss": [0.0123, 0.0061]}, "as reported")
    assert small["top"] == 0.0135 and small["bottom"] == 0.0  # a small loss keeps its digits


def test_an_elastic_jobs_page_shows_its_group_its_changes_and_who_waits():
    from tony_workflow.history import build_record

    elastic = {"size": 2, "target": 3, "min": 2, "round": 1, "changes": 1, "max_changes": 10,
               "waiting": ["worker:1"], "below_min_since": None,
               "history": [{"at": 100.0, "session": 0, "size": 0, "event": "session started"},
                           {"at": 110.0, "round": 0, "size": 3, "event": "group formed",
                            "members": ["worker:0", "worker:1", "worker:2"],
                            "joined": ["worker:0", "worker:1", "worker:2"]},
                           {"at": 130.0, "round": 1, "size": 2, "event": "group shrank", "members": ["worker:0", "worker:2"],
                            "left": ["worker:1"], "causes": {"worker:1": "exit code 137 (SIGKILL)"}}]}
    status = {"application_id": "application_1_0007", "state": "RUNNING", "tasks": [], "elastic": elastic}
    events = [{"event": "elastic_member_lost", "ts": 128.0, "task": "worker:1", "cause": "exit code 137 (SIGKILL)",
               "reclaimed": False, "changes": 1, "max_changes": 10},
              {"event": "elastic_group", "ts": 130.0, "what": "group shrank", "size": 2, "target": 3, "round": 1,
               "left": ["worker:1"], "causes": {"worker:1": "exit code 137 (SIGKILL)"}}]
    record = build_record(status, events, user="u", conf={}, requested={})
    assert record["elastic"] == elastic
    page = render("job.html", r=record, live=True, charts=[], progress="", base="", q="").body.decode()
    assert "<b>Elastic group</b>: 2 of 3 nodes train (at least 2); waiting to join: worker:1" in page
    assert "membership changes 1 of 10" in page
    assert "group shrank; left: worker:1" in page and "worker:1: exit code 137 (SIGKILL)" in page
    assert "task worker:1 left the elastic group; a replacement is asked for" in page   # the timeline
    assert "group shrank: 2 of 3 nodes train (round 1)" in page


def test_a_jobs_page_and_the_list_say_where_the_job_came_from():
    from tony_workflow.history import build_record

    context = {"source": "azkaban", "project": "ml", "flow_id": "nightly", "execution_id": "42", "job_id": "train",
               "attempt": "0", "url": "https://az.example.com/executor?execid=42&x=<y>"}
    status = {"application_id": "application_1_0008", "state": "SUCCEEDED", "tasks": [], "context": context}
    record = build_record(status, [], user="u", conf={"tony.application.tags": "team-a"}, requested={})
    assert record["context"] == context and "azkaban.flow.execid:42" in record["tags"] and "team-a" in record["tags"]
    page = render("job.html", r=record, live=False, charts=[], progress="", base="", q="").body.decode()
    assert "<b>Started by</b> Azkaban project ml, flow nightly, execution 42, job train, attempt 0" in page
    assert 'href="https://az.example.com/executor?execid=42&amp;x=&lt;y&gt;">the execution</a>' in page
    listing = render("jobs.html", running=[], page=Page([record], 1, 0, 50), q="", keep={}, asked={}, filters={},
                     states=(), progress_text=str, base="").body.decode()
    assert "Azkaban project ml, flow nightly, execution 42" in listing
    bare = build_record({**status, "context": None}, [], user="u", conf={}, requested={})
    assert "Started by" not in render("job.html", r=bare, live=False, charts=[], progress="", base="",
                                       q="").body.decode()


def test_an_ended_jobs_page_advises_its_next_run_with_the_keys_to_set():
    from tony_workflow.advice import advise
    from tony_workflow.history import build_record

    status = {"application_id": "application_1_0008", "state": "SUCCEEDED", "started_at": 1.0, "finished_at": 60.0,
              "tasks": [{"type": "worker", "index": 0, "state": "SUCCEEDED", "exit_code": 0,
                         "metrics": {"max_rss_mb": 200.0}}]}
    record = build_record(status, [], user="u", conf={}, requested={"worker": {"memory_mb": 4096, "vcores": 1,
                                                                              "gpus": 0}})
    page = render("job.html", r=record, live=False, charts=[], progress="", base="", q="",
                   advice=advise([record])).body.decode()
    assert "Next run (moderate, memory): worker asked for 4.0 GiB and used at most 200 MiB" in page
    assert "<code>tony.worker.memory=256m</code>" in page
