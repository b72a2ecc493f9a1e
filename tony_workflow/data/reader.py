"""A task's share of an input, batch by batch, with a state that resumes the whole group.

``dataset("train", batch_size=64, shuffle=True, seed=7)`` is this task's share of the job's input
``train`` (its plan comes from the job's manifest, :mod:`.manifest`). Iterating over it yields one
epoch of batches, each a dict of column name to numpy array; the next iteration is the next
epoch, and ``ds.epoch`` may be set. Which rows a batch holds follows :mod:`.plan` (the epoch's
sequence, this rank's piece of what is left): the reader itself only reads.

**Its place in the group** is asked at each iteration's start (so a regroup is seen): given
``rank``/``world``, else torch.distributed's when it is initialized, else ``RANK``/``WORLD_SIZE``
(PyTorch's launchers), else ``TF_CONFIG`` (the chief, then the workers; a ParameterServerStrategy
job's coordinator reads for all), else one process alone.

**Its state** (:meth:`Dataset.state_dict`) is the epoch, what was left of it when this group
formed, the group's size and batch and the steps taken since: a few numbers and intervals,
never data. It is the same on every rank, so rank 0's saved copy resumes every rank, and a group of
another size takes up exactly what the last one left. A batch counts as taken when it is handed
out; with :meth:`Dataset.commit` (torch_elastic's ``State.commit`` calls it) the saved state
is the position of the last committed step instead, so a step that failed mid-way is replayed.

**Reading** runs in a background thread, a window ahead of the batches handed out (pyarrow reads
and decodes without holding the GIL), so it overlaps the training step.
"""
from __future__ import annotations

import functools
import json
import os
import queue
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DataError
from ..spec.data import DataInput, parse_filter
from .arrays import to_numpy
from .formats import BadFile, format_named
from .fs import FileSystem, filesystem_for
from .manifest import Plan, load_manifest, plan_input
from .plan import EpochOrder, Interval, assign, left_after, local_rows, share

__all__ = ["STATE_FORMAT", "Dataset", "dataset", "group_of"]

#: The ``format`` of a saved state.
STATE_FORMAT = "tony-data/1"
#: Default rows of a shuffle window.
WINDOW = 16384
_END = object()


def group_of(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(rank, world size) of this process, from the first that says: torch.distributed, torch's
    launchers' variables, TF_CONFIG; (0, 1) alone."""
    env = dict(os.environ) if env is None else env
    try:
        import sys
        if "torch.distributed" in sys.modules:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                return dist.get_rank(), dist.get_world_size()
    except (ImportError, RuntimeError, ValueError):  # an odd torch build: fall back to the variables
        pass
    if env.get("RANK") and env.get("WORLD_SIZE"):
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    if env.get("TF_CONFIG"):
        config = json.loads(env["TF_CONFIG"])
        cluster, task = config.get("cluster") or {}, config.get("task") or {}
        if "ps" in cluster:  # the coordinator alone runs Python; it reads for the workers
            return 0, 1
        members = [("chief", i) for i in range(len(cluster.get("chief", [])))] + \
                  [("worker", i) for i in range(len(cluster.get("worker", [])))]
        place = (task.get("type"), int(task.get("index", 0)))
        if place in members:
            return members.index(place), len(members)
    return 0, 1


def rank_hosts(world: int, env: dict[str, str] | None = None) -> list[str]:
    """Each rank's host, where the job's cluster spec says it for a group of ``world``: TF_CONFIG's
    chief and workers, or TonY's CLUSTER_SPEC for this task's type when ranks are its indexes."""
    env = dict(os.environ) if env is None else env
    try:
        if env.get("TF_CONFIG"):
            cluster = json.loads(env["TF_CONFIG"]).get("cluster") or {}
            if "ps" not in cluster:
                members = [*cluster.get("chief", []), *cluster.get("worker", [])]
                if len(members) == world:
                    return [m.rsplit(":", 1)[0] for m in members]
        if env.get("CLUSTER_SPEC") and env.get("JOB_NAME"):
            members = json.loads(env["CLUSTER_SPEC"]).get(env["JOB_NAME"]) or []
            if len(members) == world and env.get("RANK", env.get("TASK_INDEX")) == env.get("TASK_INDEX"):
                return [m.rsplit(":", 1)[0] for m in members]
    except (ValueError, AttributeError):
        pass
    return []


@functools.lru_cache(maxsize=1024)
def _address(host: str) -> str:
    """A host as an address, so that a name and an IP of one machine compare equal."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


class _Source:
    """The open files of one plan, and its units read whole as tables."""

    def __init__(self, plan: Plan, columns: Sequence[str]):
        self.plan = plan
        self.columns = list(columns)
        self.format = format_named(plan.format)
        self.expression = plan.input.filter.expression() if plan.input.filter else None
        read = list(dict.fromkeys([*self.columns, *(plan.input.filter.columns if plan.input.filter else ())]))
        self.read_columns = read
        self.files: OrderedDict[int, Any] = OrderedDict()
        self.fs: dict[str, FileSystem] = {}

    def _file(self, index: int) -> Any:
        if index in self.files:
            self.files.move_to_end(index)
            return self.files[index][1]
        planned = self.plan.files[index]
        scheme = planned.path.split("://", 1)[0] if "://" in planned.path else ""
        if scheme not in self.fs:
            self.fs[scheme] = self.plan.fs or filesystem_for(planned.path)
        f = self.fs[scheme].open(planned.path, planned.size)
        try:
            opened = self.format.open(f)
        except BadFile as e:
            f.close()
            raise DataError(str(e), self.plan.input.name, planned.path) from None
        self.files[index] = (f, opened)
        while len(self.files) > 8:
            self.files.popitem(last=False)[1][0].close()
        return opened

    def unit(self, index: int) -> pa.Table:
        file_index, unit_index, rows = self.plan.units[index]
        planned = self.plan.files[file_index]
        try:
            table = self.format.read(self._file(file_index), planned.info, unit_index, self.read_columns)
        except BadFile as e:
            raise DataError(str(e), self.plan.input.name, planned.path) from None
        except OSError as e:
            raise DataError(f"cannot be read: {e}", self.plan.input.name, planned.path) from None
        if self.expression is not None:
            table = table.filter(self.expression)
        if table.num_rows != rows:
            raise DataError(f"unit {unit_index} holds {table.num_rows} rows where the job's plan counted {rows}: "
                            "the file changed after the job was submitted", self.plan.input.name, planned.path)
        return table.select(self.columns)

    def close(self) -> None:
        for f, _ in self.files.values():
            f.close()
        self.files.clear()


class Dataset:
    """One rank's share of an input (see the module's docstring). Made by :func:`dataset`."""

    def __init__(self, plan: Plan, batch_size: int, *, shuffle: bool = False, seed: int = 0, window: int = WINDOW,
                 columns: Sequence[str] | None = None, remainder: str | None = None, rank: int | None = None,
                 world: int | None = None, prefetch: int = 2):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.plan = plan
        self.name = plan.input.name
        self.batch_size = int(batch_size)
        self.shuffle, self.seed, self.window = bool(shuffle), int(seed), int(window)
        self.remainder = remainder or plan.input.remainder
        self.columns = list(columns) if columns is not None else plan.columns
        missing = [c for c in self.columns if c not in plan.schema.names]
        if missing:
            raise DataError(f"has no column {', '.join(missing)} (it has {', '.join(plan.schema.names)})", self.name)
        self._rank, self._world = rank, world
        self.prefetch = max(1, int(prefetch))
        self._rows = [u[2] for u in plan.units]
        self._epoch = 0
        self._left: list[Interval] = [(0, sum(self._rows))]
        self._segment: tuple[int, int] | None = None  # (world, batch) of the group the steps count in
        self._steps = 0
        self._committed: int | None = None
        self._source: _Source | None = None
        self._assigned: tuple[Any, dict[int, int]] | None = None

    # -- the group and the position ------------------------------------------------------------

    def group(self) -> tuple[int, int]:
        """(rank, world size) this rank reads as (see the module's docstring)."""
        if self._rank is not None and self._world is not None:
            return self._rank, self._world
        return group_of()

    def set_group(self, rank: int, world: int) -> None:
        """Reads as rank ``rank`` of ``world`` from now on (the next iteration takes up what the
        last group left)."""
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not a place in a group of {world}")
        self._rank, self._world = int(rank), int(world)

    @property
    def rows(self) -> int:
        """Rows of the input (after its filter)."""
        return sum(self._rows)

    @property
    def epoch(self) -> int:
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        if int(value) != self._epoch:
            self._epoch = int(value)
            self._restart()

    def _restart(self) -> None:
        self._left = [(0, self.rows)]
        self._segment, self._steps, self._committed = None, 0, None

    def _rebase(self, world: int) -> None:
        """Starts a segment for ``world`` ranks from what the last one left."""
        if self._segment is not None and self._segment != (world, self.batch_size):
            seg_world, seg_batch = self._segment
            steps = self._steps if self._committed is None else self._committed
            self._left = left_after(self._left, seg_world, seg_batch, self.remainder, steps)
            self._steps, self._committed = 0, None
        self._segment = (world, self.batch_size)

    def _piece(self, rank: int, world: int, order: EpochOrder) -> int:
        """Which piece of the segment this rank reads: its own, or on HDFS, where every rank's
        machine is known, the one whose units have most replicas on this rank's machine (the same
        assignment on every rank, a permutation of the pieces, so the shares stay equal and the
        state the same)."""
        hosts = rank_hosts(world)
        if not hosts or not self.plan.unit_hosts:
            return rank
        key = (self._epoch, tuple(self._left), world, self.batch_size)
        if self._assigned is None or self._assigned[0] != key:
            unit_hosts = [{_address(h) for h in hs} for hs in self.plan.unit_hosts]
            pieces = [share(self._left, world, self.batch_size, self.remainder, p).spans for p in range(world)]
            scores = [[local_rows(order, spans, unit_hosts, _address(hosts[r])) for r in range(world)]
                      for spans in pieces]
            owner = assign(scores)
            self._assigned = (key, {r: p for p, r in enumerate(owner)})
        return self._assigned[1][rank]

    def steps(self) -> int:
        """The steps of this rank's share of the epoch left from the current position."""
        rank, world = self.group()
        self._rebase(world)
        return share(self._left, world, self.batch_size, self.remainder, rank).steps - self._steps

    def __len__(self) -> int:
        """Steps of a whole epoch at this group's size."""
        rank, world = self.group()
        return share([(0, self.rows)], world, self.batch_size, self.remainder, rank).steps

    # -- the state ------------------------------------------------------------------------------

    def commit(self) -> None:
        """Marks the batches handed out so far as trained: the saved state is here from now on."""
        self._committed = self._steps

    def state_dict(self) -> dict[str, Any]:
        """The position, small and the same on every rank (the module's docstring)."""
        steps = self._steps if self._committed is None else self._committed
        world, batch = self._segment or (self.group()[1], self.batch_size)
        return {"format": STATE_FORMAT, "input": self.name, "fingerprint": self.plan.fingerprint, "seed": self.seed,
                "shuffle": self.shuffle, "window": self.window, "remainder": self.remainder, "epoch": self._epoch,
                "left": [list(i) for i in self._left], "world": world, "batch": batch, "steps": steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from a saved :meth:`state_dict`, whatever group saved it."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise DataError(f"is not a saved state of this reader (format {STATE_FORMAT})", self.name)
        if state.get("fingerprint") != self.plan.fingerprint:
            raise DataError(f"the saved state is of other data (plan {state.get('fingerprint')}, this job's "
                            f"{self.plan.fingerprint}): its files or their filter changed since it was saved", self.name)
        for key in ("seed", "shuffle", "window"):
            if state.get(key) != getattr(self, key):
                raise DataError(f"the saved state was taken with {key}={state.get(key)!r}, this reader has "
                                f"{getattr(self, key)!r}: the epoch's order would differ, so the rows left would not "
                                "be the same rows", self.name)
        self._epoch = int(state["epoch"])
        self._left = [(int(a), int(b)) for a, b in state["left"]]
        self.remainder = state.get("remainder", self.remainder)
        self._segment = (int(state["world"]), int(state["batch"]))
        self._steps, self._committed = int(state["steps"]), None  # a group of another size rebases as it reads

    def seek(self, step: int) -> None:
        """Puts the position at step ``step`` of this group's current epoch (what Keras restores)."""
        world = self.group()[1]
        if self._steps != step or self._segment not in (None, (world, self.batch_size)):
            self._left = [(0, self.rows)]
            self._segment, self._steps, self._committed = (world, self.batch_size), int(step), None

    # -- reading --------------------------------------------------------------------------------

    def _source_(self) -> _Source:
        if self._source is None:
            self._source = _Source(self.plan, self.columns)
        return self._source

    def _chunks(self, order: EpochOrder, spans: Sequence[Interval], out: queue.Queue[Any],
                stop: threading.Event) -> None:
        """Puts the rows of ``spans`` on ``out`` as tables, in order; the producer's thread."""
        try:
            source = self._source_()
            cached: tuple[int, pa.Table] | None = None
            for start, end in spans:
                for j, a, b in order.pieces(start, end):
                    if stop.is_set():
                        return
                    if cached is None or cached[0] != j:
                        units = order.window_units(j)
                        tables = [source.unit(u) for u in units]
                        cached = (j, pa.concat_tables(tables) if len(tables) != 1 else tables[0])
                    table = cached[1]
                    if order.shuffle:
                        chunk = table.take(pa.array(order.window_permutation(j)[a:b]))
                    else:
                        chunk = table.slice(a, b - a)
                    while not stop.is_set():
                        try:
                            out.put(chunk, timeout=0.2)
                            break
                        except queue.Full:
                            continue
            out.put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it in the training loop
            out.put(e)

    def _tables(self) -> Iterator[pa.Table]:
        for _, table in self._steps_read(None):
            yield table

    def _steps_read(self, picked: Callable[[int], bool] | None) -> Iterator[tuple[int, pa.Table]]:
        """(step, rows) of the rest of this epoch's share; with ``picked``, only the steps it picks,
        only their rows read, and the position left as it is (a DataLoader worker's copy reads)."""
        if self._committed is not None:  # a new iteration after a break: from the last committed step
            self._steps = self._committed
        rank, world = self.group()
        self._rebase(world)
        order = EpochOrder(self._rows, self.seed, self._epoch, self.shuffle, self.window)
        mine = share(self._left, world, self.batch_size, self.remainder, self._piece(rank, world, order))
        if self._steps >= mine.steps:  # the epoch is over: the next iteration is the next epoch's
            if picked is None:
                self._epoch += 1
                self._restart()
            return
        steps = [k for k in range(self._steps, mine.steps) if picked is None or picked(k)]
        starts = np.concatenate([[0], np.cumsum(mine.sizes)]).astype(np.int64)
        runs: list[Interval] = []  # row ranges of the share, one per run of consecutive steps
        for k in steps:
            if runs and runs[-1][1] == starts[k]:
                runs[-1] = (runs[-1][0], int(starts[k + 1]))
            else:
                runs.append((int(starts[k]), int(starts[k + 1])))
        spans = [span for a, b in runs for span in _rows_of(mine.spans, a, b)]
        chunks: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch * 4)
        stop = threading.Event()
        producer = threading.Thread(target=self._chunks, args=(order, spans, chunks, stop), daemon=True,
                                    name=f"tony-data-{self.name}")
        producer.start()
        pending: list[pa.Table] = []
        have = 0
        try:
            for k in steps:
                size = mine.sizes[k]
                while have < size:
                    item = chunks.get()
                    if item is _END:
                        raise DataError(f"the plan promised {size} more rows to this step and the files held "
                                        "fewer", self.name)
                    if isinstance(item, BaseException):
                        raise item
                    pending.append(item)
                    have += item.num_rows
                table = pa.concat_tables(pending) if len(pending) != 1 else pending[0]
                batch, rest = table.slice(0, size), table.slice(size)
                pending, have = ([rest] if rest.num_rows else []), rest.num_rows
                if picked is None:
                    self._steps = k + 1
                yield k, batch
            if picked is None:
                self._epoch += 1
                self._restart()
        finally:
            stop.set()
            producer.join(timeout=5)

    def batches(self) -> Iterator[pa.Table]:
        """The rest of this epoch as Arrow tables (for JAX, or users who want Arrow)."""
        return self._tables()

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for table in self._tables():
            yield to_numpy(table)

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None

    # -- adapters -------------------------------------------------------------------------------

    def as_tf(self, strategy: Any = None, map_fn: Any = None) -> Any:
        """This share as a ``tf.data.Dataset`` (see :mod:`.tf`)."""
        from .tf import as_tf
        return as_tf(self, strategy, map_fn)

    def keras_callback(self, keras: Any = None) -> Any:
        """The Keras callback that keeps this reader at Keras's epoch and step (see :mod:`.tf`)."""
        from .tf import keras_callback
        return keras_callback(self, keras)

    def as_torch(self) -> Any:
        """This share as a PyTorch ``IterableDataset`` (see :mod:`.torch`)."""
        from .torch import TorchDataset
        return TorchDataset(self)

    def loader(self, **options: Any) -> Any:
        """A ``DataLoader`` over :meth:`as_torch` whose batches count in this reader's state."""
        from .torch import loader
        return loader(self, **options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)  # a DataLoader's worker gets a copy: no open files, no Keras gate
        state["_source"] = None
        state.pop("_keras_gate", None)
        return state


def _rows_of(spans: Sequence[Interval], start: int, end: int) -> list[Interval]:
    """Rows ``[start, end)`` of a share whose rows lie in ``spans``, as positions."""
    out: list[Interval] = []
    offset = 0
    for a, b in spans:
        lo, hi = max(start, offset), min(end, offset + b - a)
        if lo < hi:
            out.append((a + lo - offset, a + hi - offset))
        offset += b - a
        if offset >= end:
            break
    return out


def dataset(name: str | None = None, batch_size: int = 32, *, shuffle: bool = False, seed: int = 0,
            window: int = WINDOW, columns: Sequence[str] | None = None, remainder: str | None = None,
            rank: int | None = None, world: int | None = None, path: str | Sequence[str] | None = None,
            format: str | None = None, filter: str | None = None, manifest: str | None = None,
            prefetch: int = 2) -> Dataset:
    """This task's share of the job's input ``name`` (``tony.data.<name>.*``), read in batches of
    ``batch_size`` rows. ``shuffle``: the epoch's order is seeded by ``seed`` and the epoch (a
    window of ``window`` rows is shuffled at a time, over shuffled units). ``columns``: fewer
    than the input's. ``remainder``: the input's ``drop``, ``wrap`` or ``partial`` in its place.
    ``rank``/``world``: this process's place, where it cannot be found (see :func:`group_of`).

    Outside a job, ``path`` (with ``format`` and ``filter`` as the keys take them) plans the input
    here, in this process."""
    if path is not None:
        paths = (path,) if isinstance(path, str) else tuple(path)
        plan = plan_input(DataInput(name or "data", paths, format, tuple(columns) if columns else None,
                                    parse_filter(filter) if filter else None, remainder or "drop"))
    else:
        plans = load_manifest(manifest)
        if name is None and len(plans) == 1:
            name = next(iter(plans))
        if name not in plans:
            raise DataError(f"the job has no input {name!r} (it has {', '.join(sorted(plans)) or 'none'})")
        plan = plans[str(name)]
    return Dataset(plan, batch_size, shuffle=shuffle, seed=seed, window=window, columns=columns, remainder=remainder,
                   rank=rank, world=world, prefetch=prefetch)
