"""TonyJobTrigger driven by asyncio as the triggerer drives it, against real jobs on the embedded
cluster: its serialised form, the one event it fires when the job ends, and on_kill."""
from __future__ import annotations

import asyncio

import pytest
import yaml

from airflow_provider.triggers import TonyJobTrigger
from tests.conftest import app_processes, wait_for
from tony_workflow.client import TonyClient, load_job


def job(command: str) -> str:
    return yaml.safe_dump({"name": "t", "am": {"memory": "128m"}, "command": command,
                           "tasks": {"worker": {"instances": 1, "memory": "256m"}},
                           "conf": {"tony.task.tensorboard.enabled": "false"}})


async def events(trigger: TonyJobTrigger) -> list:
    return [event async for event in trigger.run()]


def test_serialize_round_trip():
    from airflow._shared.module_loading import import_string  # what the triggerer loads triggers with
    trigger = TonyJobTrigger("application_1_0001", "tony_yarn", 2.5, output_tasks=["worker:1"], cursor='{"session": 1}')
    classpath, kwargs = trigger.serialize()
    assert kwargs == {"application_id": "application_1_0001", "tony_conn_id": "tony_yarn", "poll_interval": 2.5,
                      "output_tasks": ["worker:1"], "cursor": '{"session": 1}'}
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.job
def test_run_fires_one_event_when_the_job_ends(airflow_db, tony_home, monkeypatch, capfd):
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    # The job prints over several of the trigger's status reads; its last line has no end of line.
    handle = TonyClient("local").submit(load_job(job("for i in 1 2 3 4 5 6; do echo said $i; sleep 0.4; done; "
                                                     "printf 'said last'")))
    trigger = TonyJobTrigger(handle.app_id, poll_interval=1.5)
    capfd.readouterr()
    fired = asyncio.run(asyncio.wait_for(events(trigger), timeout=120))
    assert len(fired) == 1
    payload = fired[0].payload
    assert payload["status"] == "success" and payload["application_id"] == handle.app_id
    assert payload["job"]["state"] == "SUCCEEDED" and payload["job"]["application_id"] == handle.app_id
    # Airflow's log lines (structlog) go to the terminal here, to the task's trigger log in a triggerer
    out = capfd.readouterr()
    lines = [line.split(handle.app_id, 1)[1].split(" [")[0] for line in (out.out + out.err).splitlines()
             if "TonyJobTrigger" in line and handle.app_id in line]
    assert lines and lines[-1].startswith(" SUCCEEDED session=0")
    assert len(lines) == len(set(lines))  # one line per change, not per poll
    # What the chief (worker:0) printed, each line once, in order, before the final status line.
    logged = (out.out + out.err).splitlines()
    said = [line.split("[worker:0] ", 1)[1].split(" [")[0].strip() for line in logged if "[worker:0] said" in line]
    assert said == [f"said {i}" for i in range(1, 7)] + ["said last"], said
    final = max(i for i, line in enumerate(logged) if "SUCCEEDED session=0" in line)
    assert max(i for i, line in enumerate(logged) if "[worker:0] said" in line) < final


def test_an_unknown_application_fires_an_error_event(airflow_db, tony_home, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    fired = asyncio.run(asyncio.wait_for(events(TonyJobTrigger("application_1_9999", poll_interval=0.2)), 60))
    assert [e.payload["status"] for e in fired] == ["error"]
    assert fired[0].payload["application_id"] == "application_1_9999" and (
        "UnknownApplication: unknown application application_1_9999" in fired[0].payload["message"])


@pytest.mark.job
@pytest.mark.timeout(300)
def test_on_kill_kills_the_running_job(airflow_db, tony_home, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    client = TonyClient("local")
    handle = client.submit(load_job(job("sleep 120")))
    wait_for(lambda: handle.status().state == "RUNNING" and app_processes(handle.app_id), timeout=120)
    trigger = TonyJobTrigger(handle.app_id, poll_interval=0.2)

    async def user_marks_the_task_failed():
        # as the triggerer does: the trigger is running, is cancelled, then on_kill is awaited
        running = asyncio.ensure_future(events(trigger))
        await asyncio.sleep(1.0)
        assert not running.done()
        hook = trigger.hook
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await trigger.on_kill()
        assert trigger.hook is hook  # the run's hook, not a new client

    asyncio.run(user_marks_the_task_failed())
    status = client.attach(handle.app_id).status()
    assert status.state == "KILLED" and "Airflow" in status.diagnostics
    wait_for(lambda: not app_processes(handle.app_id), timeout=60)
