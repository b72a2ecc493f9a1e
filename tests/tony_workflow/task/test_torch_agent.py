"""torch's elastic agent's rendezvous on the AM (:mod:`tony_workflow.task.torch_agent`): torch's own
dynamic rendezvous handlers, created as ``--rdzv-backend tony`` creates them, meet through a real
AM server (its routes on an AM's state) and agree on ranks; torch's Store interface works on the
AM's store, wrapped as torch wraps it; the token is required."""
from __future__ import annotations

import threading
import time
from datetime import UTC, timedelta

import pytest

torch_dist = pytest.importorskip("torch.distributed", reason="torch is installed by `make test` (the pytorch extra)")

from torch.distributed.elastic.rendezvous import RendezvousParameters

from tests.conftest import wait_for
from tests.tony_workflow.am.test_routes import elastic_state
from tony_workflow.am.routes import AMRoutes
from tony_workflow.am.server import AMHttpServer
from tony_workflow.rpc import AMClient
from tony_workflow.task import torch_agent as elastic

pytestmark = pytest.mark.frameworks

RUN = "application_1_0001-0"


@pytest.fixture
def am(tmp_path):
    state = elastic_state(tmp_path)
    server = AMHttpServer("127.0.0.1", token="secret", view_token="view", handlers=AMRoutes(state).handlers(),
                          status=state.status_dict, task_logs=state.task_logs)
    address = server.start()
    yield state, address
    server.shutdown()


def params(address: str, run_id: str = RUN) -> RendezvousParameters:
    return RendezvousParameters(backend="tony", endpoint=address, run_id=run_id, min_nodes=2, max_nodes=2,
                                join_timeout="30", last_call_timeout="1", keep_alive_interval="1")


def agents(address: str, task_ids: tuple[str, ...], monkeypatch):
    """Handlers as each task's agent creates them (in this order), what each one's join got and
    the errors of those that failed, and the join itself, for threads."""
    monkeypatch.setenv("TONY_AM_TOKEN", "secret")
    monkeypatch.setenv("SESSION_ID", "0")
    handlers = {}
    for task_id in task_ids:
        monkeypatch.setenv("TONY_TASK_ID", task_id)
        handlers[task_id] = elastic.create_tony_handler(params(address))
    infos, errors = {}, []

    def join(task_id):
        try:
            infos[task_id] = handlers[task_id].next_rendezvous()
        except Exception as e:  # noqa: BLE001 - shown by the tests' assertions
            errors.append((task_id, e))
    return handlers, infos, errors, join


def test_two_agents_meet_in_the_ams_rendezvous_and_the_am_sees_the_group(am, monkeypatch):
    state, address = am
    handlers, infos, errors, join = agents(address, ("worker:0", "worker:1"), monkeypatch)
    threads = [threading.Thread(target=join, args=(t,)) for t in handlers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(i.rank for i in infos.values()) == [0, 1] and {i.world_size for i in infos.values()} == {2}
    # Rank 0's address for the round went through the AM's store to the other node.
    stores = {i.bootstrap_store_info.master_port for i in infos.values()}
    assert len(stores) == 1
    assert state.status.elastic["size"] == 2 and state.status.elastic["round"] == 0
    assert state.status.elastic["waiting"] == []
    for h in handlers.values():
        h.shutdown()


def test_torchs_store_interface_on_the_ams_store_wrapped_as_torch_wraps_it(am):
    _, address = am
    store = elastic.AMStore(elastic._AM(AMClient(address, "secret"), RUN), timedelta(seconds=2))
    prefixed = torch_dist.PrefixStore("torch.rendezvous.r.0", store)
    prefixed.set("MASTER_ADDR", "h1")
    assert prefixed.get("MASTER_ADDR") == b"h1" and store.get("torch.rendezvous.r.0/MASTER_ADDR") == b"h1"
    assert prefixed.add("members", 1) == 1 and prefixed.add("members", 2) == 3
    assert prefixed.compare_set("key", "", "first") == b"first"
    assert prefixed.compare_set("key", "nope", "second") == b"first"
    assert prefixed.check(["key"]) and not prefixed.check(["absent"])
    store.multi_set(["a", "b"], [b"1", b"2"])
    assert store.multi_get(["a", "b"]) == [b"1", b"2"]
    assert store.num_keys() == 5 and store.delete_key("a") and not store.delete_key("a")
    with pytest.raises(torch_dist.DistStoreError, match="no \\['absent'\\] after 2 s"):
        store.get("absent")
    with pytest.raises(torch_dist.DistStoreError):
        store.wait(["absent"], timedelta(seconds=0.5))


def test_a_rank_0_lost_before_it_starts_the_round_sends_the_others_to_the_next_round(am, monkeypatch):
    """Rank 0 joins a round and dies before it publishes its workers' address: the node waiting
    for that address leaves the round as soon as the AM names rank 0 dead, and forms the next one
    with a newcomer (it would otherwise wait out its join timeout, the group below its minimum)."""
    import threading as th

    from torch.distributed.elastic.rendezvous import api as rdzv_api

    state, address = am
    release = th.Event()
    build = rdzv_api.RendezvousStoreInfo.build

    def dies_in_build(rank, store, *args, **kwargs):
        if th.current_thread().name == "doomed":
            release.wait(60)  # "dead": it never writes the address
            raise RuntimeError("gone")
        return build(rank, store, *args, **kwargs)
    monkeypatch.setattr(rdzv_api.RendezvousStoreInfo, "build", staticmethod(dies_in_build))
    # Created first, worker:1 sorts first: rank 0.
    handlers, infos, errors, join = agents(address, ("worker:1", "worker:0", "worker:2"), monkeypatch)
    doomed = th.Thread(target=join, args=("worker:1",), name="doomed")
    survivor = th.Thread(target=join, args=("worker:0",))
    doomed.start()
    survivor.start()
    node = repr(handlers["worker:1"]._this_node)
    # Both joined round 0; the survivor waits for the address rank 0 never writes.
    seen = handlers["worker:0"]._state_holder
    wait_for(lambda: seen.state.complete and len(seen.state.participants) == 2, timeout=120,
             describe=lambda: f"round 0: {seen.state}, errors {errors}")
    time.sleep(1)
    assert survivor.is_alive() and "worker:0" not in infos
    state.elastic.rendezvous.departed(node)
    newcomer = th.Thread(target=join, args=("worker:2",))
    newcomer.start()
    survivor.join(60)
    newcomer.join(60)
    release.set()
    doomed.join(10)
    assert [t for t, _ in errors] == ["worker:1"], errors
    assert {infos["worker:0"].rank, infos["worker:2"].rank} == {0, 1}
    assert infos["worker:0"].world_size == 2
    assert handlers["worker:0"]._state_holder.state.round >= 1
    assert node not in {repr(n) for n in handlers["worker:0"]._state_holder.state.participants}
    for h in (handlers["worker:0"], handlers["worker:2"]):
        h.shutdown()


def test_a_node_the_am_names_dead_is_dropped_by_torchs_own_sanitizing():
    import pickle
    from datetime import datetime

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    now = datetime.now(UTC)
    state = _RendezvousState()
    alive, dead = _NodeDesc("h1", 10, 0), _NodeDesc("h2", 20, 0)
    state.participants = {alive: 0, dead: 1}
    state.last_heartbeats = {alive: now, dead: now}
    raw = pickle.dumps(state)
    doctored, lost = elastic.without_dead(raw, ["h2_20_0"])
    assert lost == {"h2_20_0"}   # it took part in the round: the agent restarts its workers for a new one
    marked = pickle.loads(doctored)
    beats = {repr(n): t for n, t in marked.last_heartbeats.items()}
    assert beats["h1_10_0"] == now and beats["h2_20_0"] < now - timedelta(days=365)
    assert {repr(n) for n in marked.participants} == {"h1_10_0", "h2_20_0"}   # torch's sanitizing removes it
    # Nothing dead in it, nothing named, or not a state this torch wrote: handed back as it came.
    assert elastic.without_dead(raw, ["h9_1_0"])[0] is raw and elastic.without_dead(raw, [])[0] is raw
    assert elastic.without_dead(b"not a pickle", ["h2_20_0"]) == (b"not a pickle", set())
    state.participants = {alive: 0}  # only waiting, say: gone, but no member of the round
    assert elastic.without_dead(pickle.dumps(state), ["h2_20_0"])[1] == set()


def test_another_sessions_rendezvous_is_closed_and_the_token_is_required(am, monkeypatch):
    from torch.distributed.elastic.rendezvous import RendezvousClosedError

    _, address = am
    backend = elastic.AMRendezvousBackend(elastic._AM(AMClient(address, "secret"), "application_1_0001-5"))
    with pytest.raises(RendezvousClosedError, match="not open"):
        backend.get_state()
    assert elastic.AMRendezvousBackend(elastic._AM(AMClient(address, "secret"), RUN)).get_state() is None
    from tony_workflow.rpc import AMError
    with pytest.raises(AMError, match="401"):
        elastic.AMRendezvousBackend(elastic._AM(AMClient(address, "view"), RUN)).get_state()
    monkeypatch.delenv("TONY_AM_TOKEN", raising=False)
    monkeypatch.setattr(elastic, "_TOKEN", None)
    with pytest.raises(ValueError, match="needs the AM's token"):
        elastic.create_tony_handler(params(address))
