"""The rendezvous an elastic job's agents meet in, as the AM keeps it (:mod:`tony_workflow.am.rendezvous`):
its state's compare-and-set under a fencing token, torch's Store operations, blocking reads,
the one open run id, and rounds formed once every node has joined."""
from __future__ import annotations

import threading
import time

import pytest

from tony_workflow.am.rendezvous import MAX_STORE_BYTES, BadStoreOp, Formed, Rendezvous, RendezvousClosed


@pytest.fixture
def rdzv() -> Rendezvous:
    r = Rendezvous()
    r.open("app-0")
    return r


def test_the_state_is_written_only_under_the_current_token(rdzv):
    assert rdzv.get_state("app-0") == (None, 0)
    # No state yet: only a write without a token takes.
    assert rdzv.set_state("app-0", b"one", 5) == (None, 0, False)
    assert rdzv.set_state("app-0", b"one", None) == (b"one", 1, True)
    # Now a write without a token, or with a stale one, gets the state that holds back.
    assert rdzv.set_state("app-0", b"two", None) == (b"one", 1, False)
    assert rdzv.set_state("app-0", b"two", 0) == (b"one", 1, False)
    assert rdzv.set_state("app-0", b"two", 1) == (b"two", 2, True)
    assert rdzv.get_state("app-0") == (b"two", 2)


def test_only_the_open_run_is_answered_and_a_new_one_starts_empty(rdzv):
    rdzv.set_state("app-0", b"s", None)
    rdzv.store("app-0", "set", ["k"], [b"v"])
    with pytest.raises(RendezvousClosed, match="'app-1' is not open"):
        rdzv.get_state("app-1")
    rdzv.departed("h_1_0")
    assert rdzv.dead("app-0") == ["h_1_0"]
    rdzv.open("app-1")  # the next session
    assert rdzv.dead("app-1") == []
    with pytest.raises(RendezvousClosed):
        rdzv.store("app-0", "check", ["k"], [])  # an agent of the ended session
    assert rdzv.get_state("app-1") == (None, 0)
    assert rdzv.store("app-1", "check", ["k"], []) == ([], 0, False)
    rdzv.close()
    with pytest.raises(RendezvousClosed):
        rdzv.get_state("app-1")


def test_store_operations_behave_as_torchs_store(rdzv):
    run = "app-0"
    assert rdzv.store(run, "set", ["a", "b"], [b"1", b"2"]) == ([], 0, True)
    assert rdzv.store(run, "get", ["a", "b"], []) == ([b"1", b"2"], 0, True)
    assert rdzv.store(run, "get", ["a", "zz"], []) == ([b"1", None], 0, False)
    assert rdzv.store(run, "check", ["a"], []) == ([], 0, True)
    assert rdzv.store(run, "add", ["n"], [], amount=3)[1] == 3
    assert rdzv.store(run, "add", ["n"], [], amount=-1)[1] == 2
    assert rdzv.store(run, "get", ["n"], [])[0] == [b"2"]   # counters are kept as decimal text, as TCPStore does
    rdzv.store(run, "set", ["text"], [b"x"])
    with pytest.raises(BadStoreOp, match="'text' holds no counter"):
        rdzv.store(run, "add", ["text"], [], amount=1)
    rdzv.store(run, "delete", ["text"], [])
    # compare_set: written when the key holds what is expected (absent reads as empty), and
    # always answers what the key holds afterwards.
    assert rdzv.store(run, "compare_set", ["c"], [b"", b"first"])[0] == [b"first"]
    assert rdzv.store(run, "compare_set", ["c"], [b"wrong", b"second"])[0] == [b"first"]
    assert rdzv.store(run, "compare_set", ["c"], [b"first", b"second"])[0] == [b"second"]
    assert rdzv.store(run, "count", [], [])[1] == 4
    assert rdzv.store(run, "delete", ["c", "b"], []) == ([], 0, True)
    assert rdzv.store(run, "delete", ["c"], []) == ([], 0, False)
    assert rdzv.store(run, "count", [], [])[1] == 2
    with pytest.raises(BadStoreOp, match="unknown store operation 'append'"):
        rdzv.store(run, "append", ["a"], [b"x"])
    with pytest.raises(BadStoreOp, match="as many values as keys"):
        rdzv.store(run, "set", ["a", "b"], [b"x"])


def test_a_get_waits_for_its_keys_and_gives_up_after_its_wait(rdzv):
    got = {}

    def reader():
        got["reply"] = rdzv.store("app-0", "get", ["late"], [], wait=10)
    t = threading.Thread(target=reader)
    started = time.monotonic()
    t.start()
    time.sleep(0.3)
    assert t.is_alive()  # still waiting: the key is not there
    rdzv.store("app-0", "set", ["late"], [b"here"])
    t.join(5)
    assert got["reply"] == ([b"here"], 0, True) and time.monotonic() - started < 5
    assert rdzv.store("app-0", "get", ["never"], [], wait=0.2) == ([None], 0, False)


def test_a_node_named_dead_ends_a_waiting_read_with_the_news(rdzv):
    got = {}

    def reader():
        got["reply"] = rdzv.store("app-0", "get", ["rank0-address"], [], wait=20)
    t = threading.Thread(target=reader)
    started = time.monotonic()
    t.start()
    time.sleep(0.2)
    rdzv.departed("h_7_0")
    t.join(5)
    assert not t.is_alive() and time.monotonic() - started < 5
    assert got["reply"] == ([None], 0, False) and rdzv.dead("app-0") == ["h_7_0"]
    # Named again, it is no news: a read waits its whole wait.
    rdzv.departed("h_7_0")
    assert rdzv.store("app-0", "get", ["rank0-address"], [], wait=0.3) == ([None], 0, False)


def test_a_closed_rendezvous_ends_a_waiting_read(rdzv):
    errors = []

    def reader():
        try:
            rdzv.store("app-0", "get", ["never"], [], wait=20)
        except RendezvousClosed as e:
            errors.append(e)
    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.2)
    rdzv.close()
    t.join(5)
    assert not t.is_alive() and errors


def test_the_store_refuses_to_grow_without_bound(rdzv):
    rdzv.store("app-0", "set", ["big"], [b"x" * (MAX_STORE_BYTES // 2)])
    rdzv.store("app-0", "set", ["big"], [b"y" * (MAX_STORE_BYTES // 2)])  # replacing a value frees the old one
    with pytest.raises(BadStoreOp, match="more than"):
        rdzv.store("app-0", "set", ["other"], [b"z" * (MAX_STORE_BYTES // 2 + 10)])
    rdzv.store("app-0", "delete", ["big"], [])
    rdzv.store("app-0", "set", ["other"], [b"z" * (MAX_STORE_BYTES // 2 + 10)])
    with pytest.raises(BadStoreOp, match="rendezvous state of"):
        rdzv.set_state("app-0", b"s" * (MAX_STORE_BYTES + 1), None)
    assert rdzv.get_state("app-0") == (None, 0)


def test_a_round_is_formed_once_every_node_has_joined_it(rdzv):
    assert rdzv.joined("app-0", 0, "worker:2", 0, 3) is None
    assert rdzv.joined("app-0", 0, "worker:0", 1, 3) is None
    formed = rdzv.joined("app-0", 0, "worker:1", 2, 3)
    assert formed == Formed(0, {"worker:2": 0, "worker:0": 1, "worker:1": 2}) and formed.size == 3
    assert list(formed.members) == ["worker:2", "worker:0", "worker:1"]  # in rank order
    assert rdzv.joined("app-0", 0, "worker:1", 2, 3) is None  # reported again: formed once only
    assert rdzv.joined("app-0", 1, "worker:0", 0, 1) == Formed(1, {"worker:0": 0})
    with pytest.raises(BadStoreOp, match="rank 3 is not a node of a world of 2"):
        rdzv.joined("app-0", 2, "worker:0", 3, 2)


# ---------------------------------------------------------------- in-place generations
def _gather_all(rdzv: Rendezvous, joins: dict[str, tuple[str, int]], wait: float = 5.0) -> dict[str, dict]:
    """Each node (-> (task id, after)) asks for its place at once, on threads of their own."""
    places: dict[str, dict] = {}

    def ask(node: str, task: str, after: int) -> None:
        place = rdzv.gather("app-0", task, node, after, wait)
        places[node] = place

    threads = [threading.Thread(target=ask, args=(n, t, a)) for n, (t, a) in joins.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return places


@pytest.fixture
def group() -> Rendezvous:
    r = Rendezvous()
    r.open("app-0", minimum=2, target=3)
    return r


def test_the_first_generation_waits_for_the_whole_group(group):
    # Two of three asking: no generation yet (the last call is far off).
    assert group.gather("app-0", "worker:0", "w0", -1, 0.2) is None
    places = _gather_all(group, {"w0": ("worker:0", -1), "w1": ("worker:1", -1), "w2": ("worker:2", -1)})
    assert {n: (p["generation"], p["rank"], p["world_size"]) for n, p in places.items()} == {
        "w0": (0, 0, 3), "w1": (0, 1, 3), "w2": (0, 2, 3)}
    assert places["w1"]["members"] == ["w0", "w1", "w2"]
    assert group.formed_rounds() == [Formed(0, {"worker:0": 0, "worker:1": 1, "worker:2": 2})]
    assert group.formed_rounds() == []  # each generation is reported once


def test_a_lost_member_s_survivors_re_form_without_it_keeping_their_order(group):
    _gather_all(group, {"w0": ("worker:0", -1), "w1": ("worker:1", -1), "w2": ("worker:2", -1)})
    group.formed_rounds()
    # worker:0 (rank 0) dies; the survivors asking for generation 1 must not wait for it.
    assert group.watch("app-0", 0, 0.0)["changed"] is False
    group.departed("w0")
    seen = group.watch("app-0", 0, 0.0)
    assert seen["changed"] is True and seen["dead"] == ["w0"]
    places = _gather_all(group, {"w1": ("worker:1", 0), "w2": ("worker:2", 0)})
    assert {n: (p["generation"], p["rank"], p["world_size"]) for n, p in places.items()} == {
        "w1": (1, 0, 2), "w2": (1, 1, 2)}
    assert group.formed_rounds() == [Formed(1, {"worker:1": 0, "worker:2": 1})]
    # A trainer named dead takes no part any more.
    with pytest.raises(BadStoreOp, match="named gone"):
        group.gather("app-0", "worker:0", "w0", 0, 0.1)


def test_a_newcomer_is_watched_for_and_joins_after_the_survivors(group):
    _gather_all(group, {"w0": ("worker:0", -1), "w1": ("worker:1", -1), "w2": ("worker:2", -1)})
    group.departed("w1")
    _gather_all(group, {"w0": ("worker:0", 0), "w2": ("worker:2", 0)})
    group.formed_rounds()
    # Generation 1's members watch; the replacement asks, which wakes them (not their wait's end).
    seen: dict[str, dict] = {}
    watcher = threading.Thread(target=lambda: seen.setdefault("w0", group.watch("app-0", 1, 30.0)))
    watcher.start()
    time.sleep(0.2)
    waiting: dict[str, dict | None] = {}
    newcomer = threading.Thread(target=lambda: waiting.setdefault(
        "w1b", group.gather("app-0", "worker:1", "w1b", -1, 5.0)))
    newcomer.start()
    watcher.join(timeout=10.0)
    assert not watcher.is_alive(), "a newcomer asking did not wake the watchers"
    assert seen["w0"]["changed"] is True and seen["w0"]["joining"] == ["w1b"]
    places = _gather_all(group, {"w0": ("worker:0", 1), "w2": ("worker:2", 1)})
    newcomer.join()
    places.update(waiting)
    assert {n: (p["generation"], p["rank"], p["world_size"]) for n, p in places.items()} == {
        "w0": (2, 0, 3), "w2": (2, 1, 3), "w1b": (2, 2, 3)}
    assert group.formed_rounds() == [Formed(2, {"worker:0": 0, "worker:2": 1, "worker:1": 2})]


def test_below_the_minimum_no_generation_forms(group):
    _gather_all(group, {"w0": ("worker:0", -1), "w1": ("worker:1", -1), "w2": ("worker:2", -1)})
    group.departed("w1")
    group.departed("w2")
    assert group.gather("app-0", "worker:0", "w0", 0, 0.3) is None
    assert group.generation == 0
    # A replacement brings it back to the minimum: the survivor and it form generation 1.
    places = _gather_all(group, {"w0": ("worker:0", 0), "w1b": ("worker:1", -1)})
    assert {n: p["rank"] for n, p in places.items()} == {"w0": 0, "w1b": 1}


def test_a_member_dying_while_the_others_wait_completes_the_generation(group):
    _gather_all(group, {"w0": ("worker:0", -1), "w1": ("worker:1", -1), "w2": ("worker:2", -1)})
    result: dict[str, dict | None] = {}
    threads = [threading.Thread(target=lambda n=n, t=t: result.setdefault(n, group.gather("app-0", t, n, 0, 5.0)))
               for n, t in (("w0", "worker:0"), ("w1", "worker:1"))]
    for th in threads:
        th.start()
    time.sleep(0.3)
    assert not result  # they wait for w2, still a member
    group.departed("w2")
    for th in threads:
        th.join()
    assert {n: (p["generation"], p["world_size"]) for n, p in result.items()} == {"w0": (1, 2), "w1": (1, 2)}


def test_a_new_session_starts_its_generations_afresh(group):
    _gather_all(group, {"w0": ("worker:0", -1), "w1": ("worker:1", -1), "w2": ("worker:2", -1)})
    group.open("app-1", minimum=2, target=3)
    assert group.generation == -1
    with pytest.raises(RendezvousClosed):
        group.gather("app-0", "worker:0", "w0", 0, 0.1)
