"""The planner alone: the epoch's order and each rank's share, with no files and no cluster."""
from __future__ import annotations

import collections
import json
import random

import numpy as np
import pytest

from tony_workflow.data.plan import EpochOrder, left_after, permutation, share, total

ROWS = [300, 300, 17, 1000, 0, 250, 300, 33]  # uneven units, one empty
N = sum(ROWS)


def positions(spans):
    return [p for a, b in spans for p in range(a, b)]


def rows_of(order: EpochOrder, spans):
    """The (unit, row) each position of ``spans`` names."""
    out = []
    for start, end in spans:
        for j, a, b in order.pieces(start, end):
            units = order.window_units(j)
            bounds = np.cumsum([0] + [order.rows[u] for u in units])
            for local in order.window_permutation(j)[a:b]:
                k = int(np.searchsorted(bounds, local, side="right")) - 1
                out.append((units[k], int(local - bounds[k])))
    return out


@pytest.mark.parametrize("shuffle", [False, True])
def test_an_epochs_sequence_names_every_row_once_and_depends_on_seed_and_epoch_only(shuffle):
    order = EpochOrder(ROWS, seed=7, epoch=3, shuffle=shuffle, window=400)
    named = rows_of(order, [(0, N)])
    assert sorted(named) == sorted((u, r) for u, n in enumerate(ROWS) for r in range(n))
    again = EpochOrder(ROWS, seed=7, epoch=3, shuffle=shuffle, window=400)
    assert rows_of(again, [(0, N)]) == named
    if shuffle:
        assert rows_of(EpochOrder(ROWS, seed=7, epoch=4, shuffle=True, window=400), [(0, N)]) != named
        assert rows_of(EpochOrder(ROWS, seed=8, epoch=3, shuffle=True, window=400), [(0, N)]) != named
    else:
        assert named == [(u, r) for u, n in enumerate(ROWS) for r in range(n)]


def test_a_permutation_is_a_pure_function_of_its_key():
    p = permutation(1000, 1, 2, 3)
    assert sorted(p.tolist()) == list(range(1000))
    assert p.tolist() == permutation(1000, 1, 2, 3).tolist()
    assert p.tolist() != permutation(1000, 1, 2, 4).tolist()


def test_a_window_holds_whole_units_and_a_unit_longer_than_a_window_is_one_of_its_own():
    order = EpochOrder(ROWS, seed=1, epoch=0, shuffle=True, window=400)
    covered = []
    for j in range(order.windows):
        start, end = order.window_span(j)
        assert sum(ROWS[u] for u in order.window_units(j)) == end - start
        covered += order.window_units(j)
    assert sorted(covered) == list(range(len(ROWS)))


@pytest.mark.parametrize("remainder", ["drop", "wrap", "partial"])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_every_rank_takes_the_same_number_of_steps(remainder, world):
    shares = [share([(0, N)], world, 64, remainder, r) for r in range(world)]
    assert len({s.steps for s in shares}) == 1
    taken = collections.Counter(p for s in shares for p in positions(s.spans))
    if remainder == "drop":
        assert max(taken.values()) == 1 and N - len(taken) < world * 64
        assert all(size == 64 for s in shares for size in s.sizes)
    elif remainder == "wrap":
        assert len(taken) == N and sum(taken.values()) == world * 64 * shares[0].steps
    else:
        assert len(taken) == N and max(taken.values()) == 1
        last = [s.sizes[-1] for s in shares]
        assert max(last) - min(last) <= 1 and all(size == 64 for s in shares for size in s.sizes[:-1])
    for s in shares:
        assert sum(s.sizes) == len(positions(s.spans))


def test_a_ranks_piece_is_contiguous_so_a_window_is_read_by_at_most_two_ranks():
    order = EpochOrder([100] * 40, seed=3, epoch=0, shuffle=True, window=350)
    readers = collections.defaultdict(set)
    for r in range(4):
        for a, b in share([(0, 4000)], 4, 50, "drop", r).spans:
            for j, _, _ in order.pieces(a, b):
                readers[j].add(r)
    assert max(len(v) for v in readers.values()) <= 2


def regroup(sizes_and_steps, remainder="partial", batch=50, rows=N):
    """Runs an epoch through groups of the given sizes, each taking the given steps (None: to the
    end), the state between them carried as rank 0 would save it. Returns the positions taken."""
    left = [(0, rows)]
    taken = collections.Counter()
    for world, steps in sizes_and_steps:
        shares = [share(left, world, batch, remainder, r) for r in range(world)]
        steps = shares[0].steps if steps is None else steps
        for s in shares:
            rows_left = sum(s.sizes[:steps])
            for p in positions(s.spans)[:rows_left]:
                taken[p] += 1
        state = json.loads(json.dumps({"left": left, "world": world, "steps": steps}))  # as saved
        left = left_after([tuple(i) for i in state["left"]], state["world"], batch, remainder, state["steps"])
    return taken, left


def test_four_then_three_then_four_within_one_epoch_takes_every_row_exactly_once():
    taken, left = regroup([(4, 3), (3, 2), (4, None)])
    assert left == [] and len(taken) == N and max(taken.values()) == 1


def test_random_regroups_never_take_a_row_twice_and_partial_takes_them_all():
    rng = random.Random(11)
    for _ in range(200):
        groups = [(rng.randint(1, 6), rng.randint(0, 4)) for _ in range(rng.randint(0, 4))] + [(rng.randint(1, 6), None)]
        taken, left = regroup(groups, batch=rng.choice([1, 7, 64]))
        assert max(taken.values()) == 1 and len(taken) == N and not left, groups


def test_drop_keeps_the_rows_a_smaller_group_left_for_the_next_one():
    # A group of 4 cannot fill a step for every rank with what is left; one of 2 can.
    taken, left = regroup([(4, None)], remainder="drop", batch=64)
    assert total(left) == N - len(taken) < 4 * 64
    carried, left2 = regroup([(4, 7), (2, None)], remainder="drop", batch=64)
    assert max(carried.values()) == 1 and total(left2) < 2 * 64


def test_the_state_is_a_handful_of_numbers_whatever_the_regroups():
    left = [(0, 10**9)]
    for world in [8, 5, 8, 3, 8]:
        left = left_after(left, world, 256, "drop", 1000)
    assert len(json.dumps(left)) < 2048


def test_pieces_go_to_the_ranks_that_hold_them_and_every_piece_to_one_rank():
    from tony_workflow.data.plan import assign
    assert assign([[0, 9, 0], [5, 0, 0], [0, 0, 0]]) == [1, 0, 2]
    assert assign([[1, 1], [1, 1]]) == [0, 1]  # no preference: each its own
    owners = assign([[3, 3, 3], [3, 3, 3], [0, 0, 9]])
    assert sorted(owners) == [0, 1, 2] and owners[2] == 2
