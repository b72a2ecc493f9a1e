"""The order of an epoch and each rank's share of it: pure functions of numbers, no files.

An input is a list of *units* (Parquet row groups, ORC stripes, runs of Avro blocks, runs of
TFRecord records), each with its number of rows. Everything the reader does follows from:

- **The epoch's sequence** (:class:`EpochOrder`), a function of the units' rows, the seed and the
  epoch only, never of the number of ranks: with ``shuffle`` the units are permuted, the permuted
  rows are cut into *windows* of about ``window`` rows (at unit boundaries), and each window's rows
  are permuted; without it the sequence is the rows in their files' order. Position ``p`` of the
  sequence names one row of one unit.
- **What is left of the epoch**: a list of ``[start, end)`` intervals of positions, in order. An
  epoch starts with ``[(0, rows)]``.
- **A segment** (:func:`share`): the ranks of one world size take what is left in equal steps of
  ``batch`` rows. The left-over positions are laid end to end and cut into one contiguous piece
  per rank, so that a rank reads few windows and a window is read by at most two ranks. The
  remainder that does not fill a step for every rank is ``drop``-ped (left unread), ``wrap``-ped
  (the pieces are filled up from the start of what was left) or given out as a ``partial`` last
  step (each rank's batch smaller by at most one row of the others'), so every rank takes the same
  number of steps and a synchronous job never waits on one that ran out.
- **Consumption** (:func:`left_after`): ranks step together, so ``steps`` taken in a segment say
  what every rank has read. What is left after them is a new interval list, and a new segment may
  have another world size: the state one rank saves is the state of the whole group.

Permutations come from PCG64's raw bits (stable for a seed across NumPy versions, unlike its
distributions) sorted stably, so every process of a job computes the same order.
"""
from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..spec.data import REMAINDERS

__all__ = ["REMAINDERS", "EpochOrder", "Interval", "Share", "assign", "left_after", "local_rows", "permutation",
           "share", "total"]

Interval = tuple[int, int]


def permutation(n: int, *key: int) -> np.ndarray:
    """A permutation of ``range(n)`` determined by ``key`` (integers) alone."""
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    bits = np.random.PCG64(np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in key])).random_raw(n)
    return np.argsort(bits, kind="stable").astype(np.int64)


# Tags that keep the unit order's and the windows' streams apart for one seed and epoch.
_UNITS, _WINDOW = 1, 2


class EpochOrder:
    """The sequence of one epoch: which unit and row each position names.

    ``rows`` are the units' row counts in their natural order. Windows are numbered in sequence
    order; ``window_units(j)`` are the units of window ``j`` (in sequence order) and
    ``window_permutation(j)`` maps a position's offset in the window to a row of the window's
    units laid end to end."""

    def __init__(self, rows: Sequence[int], seed: int, epoch: int, shuffle: bool, window: int):
        self.rows = np.asarray(rows, dtype=np.int64)
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), bool(shuffle)
        n = len(self.rows)
        self.units = permutation(n, self.seed, self.epoch, _UNITS) if self.shuffle else np.arange(n, dtype=np.int64)
        ordered = self.rows[self.units]
        self.unit_starts = np.concatenate([[0], np.cumsum(ordered)]).astype(np.int64)
        self.total = int(self.unit_starts[-1])
        if self.shuffle and window > 0 and n:
            # A unit belongs to the window its first row falls in; a unit longer than a window
            # makes a window of its own.
            window_of = self.unit_starts[:-1] // int(window)
            firsts = np.flatnonzero(np.concatenate([[True], window_of[1:] != window_of[:-1]]))
        else:
            firsts = np.arange(n, dtype=np.int64)
        # Units of no rows (an empty row group) start no window of their own.
        keep = [int(i) for i in firsts if i == 0 or ordered[i] > 0 or self.unit_starts[i] != self.unit_starts[i - 1]]
        self.window_first = np.asarray(keep + [n], dtype=np.int64)
        self.window_starts = self.unit_starts[self.window_first]

    @property
    def windows(self) -> int:
        return len(self.window_first) - 1

    def window_of(self, position: int) -> int:
        """The window holding ``position`` (0 <= position < total)."""
        return int(np.searchsorted(self.window_starts, position, side="right")) - 1

    def window_span(self, j: int) -> Interval:
        return int(self.window_starts[j]), int(self.window_starts[j + 1])

    def window_units(self, j: int) -> list[int]:
        """The units (natural indices) of window ``j``, in sequence order."""
        return [int(u) for u in self.units[self.window_first[j]:self.window_first[j + 1]]]

    def window_permutation(self, j: int) -> np.ndarray:
        start, end = self.window_span(j)
        if not self.shuffle:
            return np.arange(end - start, dtype=np.int64)
        return _window_permutation(end - start, self.seed, self.epoch, j)

    def pieces(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """``[start, end)`` of the sequence as ``(window, offset, offset_end)`` pieces, in order."""
        out = []
        position = start
        while position < end:
            j = self.window_of(position)
            w_start, w_end = self.window_span(j)
            stop = min(end, w_end)
            out.append((j, position - w_start, stop - w_start))
            position = stop
        return out


@lru_cache(maxsize=8)
def _window_permutation(n: int, seed: int, epoch: int, j: int) -> np.ndarray:
    return permutation(n, seed, epoch, _WINDOW, j)


def total(intervals: Sequence[Interval]) -> int:
    return sum(b - a for a, b in intervals)


@dataclass(frozen=True)
class Share:
    """One rank's part of a segment: ``spans`` (positions, in reading order) and ``sizes`` (the
    rows of each of its steps; every rank of the segment has the same number of steps)."""

    spans: tuple[Interval, ...]
    sizes: tuple[int, ...]

    @property
    def steps(self) -> int:
        return len(self.sizes)

    @property
    def rows(self) -> int:
        return sum(self.sizes)


def _virtual(intervals: Sequence[Interval], start: int, end: int) -> list[Interval]:
    """Positions ``[start, end)`` of the intervals laid end to end, as intervals of positions."""
    out: list[Interval] = []
    offset = 0
    for a, b in intervals:
        length = b - a
        lo, hi = max(start, offset), min(end, offset + length)
        if lo < hi:
            out.append((a + lo - offset, a + hi - offset))
        offset += length
        if offset >= end:
            break
    return out


def _wrapped(intervals: Sequence[Interval], start: int, end: int) -> list[Interval]:
    """As :func:`_virtual`, for a range that may run past the end and around again."""
    n = total(intervals)
    out: list[Interval] = []
    while start < end and n:
        base = (start // n) * n
        stop = min(end, base + n)
        out.extend(_virtual(intervals, start - base, stop - base))
        start = stop
    return out


def _cuts(n: int, world: int, batch: int, remainder: str) -> tuple[int, int]:
    """Full steps of ``batch`` rows per rank, and the rows of a partial last step over all ranks."""
    per_step = world * batch
    if remainder == "wrap":
        return -(-n // per_step), 0
    full = n // per_step
    return full, (n - full * per_step if remainder == "partial" else 0)


def _rank_ranges(n: int, world: int, batch: int, remainder: str, rank: int) -> tuple[list[Interval], list[int]]:
    """Rank ``rank``'s virtual ranges of a segment over ``n`` rows, and its steps' sizes."""
    full, partial = _cuts(n, world, batch, remainder)
    ranges = [(rank * full * batch, (rank + 1) * full * batch)] if full else []
    sizes = [batch] * full
    if partial:
        small, extra = divmod(partial, world)
        before = rank * small + min(rank, extra)
        mine = small + (1 if rank < extra else 0)
        start = world * full * batch + before
        if mine:
            ranges.append((start, start + mine))
        sizes.append(mine)
    return ranges, sizes


def share(left: Sequence[Interval], world: int, batch: int, remainder: str, rank: int) -> Share:
    """Rank ``rank``'s share of a segment of ``world`` ranks over the ``left`` positions."""
    if not 0 <= rank < world or batch < 1:
        raise ValueError(f"rank {rank} of {world} with batches of {batch}: not a place in a group")
    n = total(left)
    ranges, sizes = _rank_ranges(n, world, batch, remainder, rank)
    spans: list[Interval] = []
    for start, end in ranges:
        spans.extend(_wrapped(left, start, end) if remainder == "wrap" else _virtual(left, start, end))
    return Share(tuple(spans), tuple(sizes))


def _normalized(intervals: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract(left: Sequence[Interval], taken: list[Interval]) -> list[Interval]:
    taken = _normalized(taken)
    starts = [a for a, _ in taken]
    out: list[Interval] = []
    for a, b in left:
        position = a
        i = max(bisect.bisect_right(starts, a) - 1, 0)
        while i < len(taken) and taken[i][0] < b:
            t_a, t_b = taken[i]
            if t_b > position:
                if t_a > position:
                    out.append((position, min(t_a, b)))
                position = max(position, t_b)
            i += 1
        if position < b:
            out.append((position, b))
    return out


def left_after(left: Sequence[Interval], world: int, batch: int, remainder: str, steps: int) -> list[Interval]:
    """What is left of ``left`` once a segment's ranks have each taken ``steps`` steps."""
    taken: list[Interval] = []
    for rank in range(world):
        spans = share(left, world, batch, remainder, rank)
        rows = sum(spans.sizes[:steps])
        for a, b in spans.spans:
            if rows <= 0:
                break
            taken.append((a, a + min(b - a, rows)))
            rows -= b - a
    return _subtract(left, taken)


def local_rows(order: EpochOrder, spans: Sequence[Interval], unit_hosts: Sequence[Collection[str]],
               host: str) -> float:
    """About how many rows of ``spans`` lie in units with a replica on ``host``."""
    rows = 0.0
    for start, end in spans:
        for j, a, b in order.pieces(start, end):
            w_start, w_end = order.window_span(j)
            fraction = (b - a) / max(1, w_end - w_start)
            rows += fraction * sum(int(order.rows[u]) for u in order.window_units(j) if host in unit_hosts[u])
    return rows


def assign(scores: Sequence[Sequence[float]]) -> list[int]:
    """Which rank reads each piece: ``scores[piece][rank]`` is how much of the piece is local to the
    rank. Greedy, best first, ties to the piece's own index: the same on every rank, and a
    permutation, so every piece is read by one rank and equal shares stay equal."""
    n = len(scores)
    owner = [-1] * n
    taken: set[int] = set()
    pairs = sorted(((scores[p][r], p == r, -p, -r) for p in range(n) for r in range(n)), reverse=True)
    for score, _, neg_p, neg_r in pairs:
        p, r = -neg_p, -neg_r
        if owner[p] < 0 and r not in taken and score > 0:
            owner[p] = r
            taken.add(r)
    free = [r for r in range(n) if r not in taken]
    for p in range(n):
        if owner[p] < 0:
            owner[p] = p if p in free else free[0]
            free.remove(owner[p])
    return owner
