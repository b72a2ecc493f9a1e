"""What executors and clients tell the ApplicationMaster: its route handlers.

:class:`AMRoutes` is given the AM's state (:class:`~tony_workflow.am.state.AMState`) and nothing else
of the AM. Each handler runs on a server thread and receives its route's request already checked
against the protocol's declaration (:mod:`tony_workflow.protocol`: a malformed one never gets here,
the server answers it 400). It takes the state's lock, checks that the request comes from the
task's current session and container, records what it was told, and wakes the monitor thread. No
handler decides anything: the monitor (:class:`~tony_workflow.am.master.ApplicationMaster`) does, on its
next pass, so decisions are taken in one place and in order.

Registration, top-down: an executor that reserved its port posts :class:`~.protocol.Registration`
(:meth:`AMRoutes.register`); the task becomes REGISTERED; when it is the session's last, the
cluster spec is made (:meth:`~.am_state.AMState.cluster_dict`) and the session's gang event is set,
which answers every executor waiting in :meth:`AMRoutes.cluster_spec`.
"""
from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from .. import protocol
from ..protocol import (
    Ack,
    ClusterSpecQuery,
    ClusterSpecReply,
    Go,
    GroupReply,
    GroupRequest,
    Handler,
    Heartbeat,
    Kill,
    Notebook,
    Problem,
    Registration,
    RendezvousRound,
    RendezvousServer,
    RendezvousState,
    Result,
    SetState,
    Started,
    StateQuery,
    Stop,
    StoreOp,
    StoreReply,
    TensorBoard,
)
from ..status import TaskState
from .elastic_group import ElasticPart
from .rendezvous import BadStoreOp, RendezvousClosed
from .state import AMState, Task

__all__ = ["AMRoutes"]

_ACK: Ack = {"ok": True}


def _stop(why: str) -> tuple[int, Stop]:
    return 409, {"error": why, "action": "stop"}


class AMRoutes:
    """The handler of every route of the protocol, on an AM's state."""

    def __init__(self, state: AMState):
        self.state = state

    def handlers(self) -> dict[str, Handler]:
        s = self.state
        return {
            protocol.REGISTER.name: self.register,
            protocol.CLUSTER_SPEC.name: self.cluster_spec,
            protocol.HEARTBEAT.name: self.heartbeat,
            protocol.STARTED.name: self.started,
            protocol.RESULT.name: self.result,
            protocol.TENSORBOARD.name: self.tensorboard,
            protocol.NOTEBOOK.name: self.notebook,
            protocol.HOROVOD_DRIVER.name: self.horovod_driver,
            protocol.STATUS.name: lambda _: (200, s.status_dict()),
            protocol.RECORD.name: lambda _: (200, s.record()),
            protocol.KILL.name: self.kill,
            protocol.RDZV_STATE.name: self.rdzv_state,
            protocol.RDZV_SET_STATE.name: self.rdzv_set_state,
            protocol.RDZV_STORE.name: self.rdzv_store,
            protocol.RDZV_ROUND.name: self.rdzv_round,
            protocol.RDZV_GROUP.name: self.rdzv_group,
        }

    def _task_for(self, task_id: str, session_id: int, container_id: str | None = None) -> Task | tuple[int, Stop]:
        """The current task the request comes from, or the answer that stops its executor: the task
        is unknown, of another session, stopping or ended, or runs in another container now.
        Called with the lock held."""
        task = self.state.tasks.get(task_id)
        if task is None:
            return 404, {"error": f"unknown task {task_id!r}", "action": "stop"}
        if session_id != task.session_id or task.stopping or task.final:
            return _stop("stale session or stopped task")
        if container_id and container_id != task.container.id:
            return _stop("stale container")
        return task

    # ---------------------------------------------------------------- executors
    def register(self, req: Registration) -> tuple[int, Ack | Stop]:
        s = self.state
        with s.lock:
            task = self._task_for(req.task_id, req.session_id, req.container_id)
            if not isinstance(task, Task):
                return task
            if task.fixed_port and req.port != task.fixed_port:
                return _stop(f"relaunched task must keep port {task.fixed_port}")
            task.status.host, task.status.port, task.status.pid = req.host, req.port, req.pid
            task.registered_at = task.last_heartbeat = time.time()
            s.set_task_state(task, TaskState.REGISTERED, host=req.host, port=req.port)
            s.cluster_spec = None
            if all(t.registered_at for t in s.tasks.values()):
                s.cluster_spec = s.cluster_dict()
                s.gang_ready.set()
                s.events.emit("cluster_spec_ready", session=s.session_id, cluster=s.cluster_spec)
            return 200, _ACK

    def cluster_spec(self, q: ClusterSpecQuery) -> tuple[int, ClusterSpecReply | Stop | None]:
        """Answers once the session's cluster spec is made, or with 204 after ``q.wait`` seconds
        (a minute at most)."""
        s = self.state
        deadline = time.time() + min(max(q.wait, 0.0), 60.0)
        while True:
            with s.lock:
                task = s.tasks.get(q.task_id)
                if task is None or task.session_id != q.session_id or task.stopping:
                    return _stop("stale session")
                # TonY's stages: the training stage's commands start once the prepare stage succeeded.
                if s.cluster_spec is not None and not s.held_for_stage(task):
                    return 200, {"cluster": s.cluster_spec, "session_id": q.session_id, "chief": list(s.chief)}
                remaining = deadline - time.time()
                if remaining <= 0:
                    return 204, None
                gang = s.gang_ready
                if gang.is_set():  # a task relaunched alone is registering again
                    s.cond.wait(min(remaining, s.tick))
                    continue
            # Waiters sleep on the gang's own event, not the AM's condition: registrations would
            # otherwise wake every waiting request once per task (N² wake-ups for a gang of N).
            gang.wait(remaining)

    def horovod_driver(self, req: RendezvousServer) -> tuple[int, Ack | Stop]:
        """A Horovod job's driver says where its rendezvous server listens: the workers' cluster
        spec, held until now, names it as the driver's address."""
        s = self.state
        with s.lock:
            task = self._task_for(req.task_id, req.session_id)
            if not isinstance(task, Task):
                return task
            if task.status.type != "driver":
                return _stop(f"{req.task_id} is not a Horovod driver")
            s.rendezvous = (req.session_id, req.host, req.port)
            if s.cluster_spec is not None:
                s.cluster_spec = s.cluster_dict()
            s.events.emit("horovod_rendezvous", session=req.session_id, host=req.host, port=req.port,
                          slots=len(req.slots or []))
            s.cond.notify_all()
            return 200, _ACK

    def heartbeat(self, req: Heartbeat) -> tuple[int, Go | Stop]:
        s = self.state
        now = time.time()
        with s.lock:
            task = self._task_for(req.task_id, req.session_id, req.container_id)
            if not isinstance(task, Task):
                return task
            task.last_heartbeat = now
            # Figures change with every beat: they are persisted with the next slow snapshot, and
            # the job's progress is worked out by the monitor, not once per beat.
            if req.metrics:
                task.status.metrics = req.metrics
                s.board.figures_changed()
            if task.progress.update(req.progress, now):
                task.status.progress = task.progress.to_dict()
                s.progressed_types.add(task.status.type)
                s.board.figures_changed(progressed=True)
            store = req.store or {}
            changed, failure = s.store.report(task.id, task.session_id, store.get("error"), bool(store.get("ok")))
            if changed:
                s.warnings_changed()
                s.publish()
            if failure:
                s.fail_for_store(failure)
            return 200, {"action": "continue"}

    def started(self, req: Started) -> tuple[int, Ack | Stop]:
        s = self.state
        with s.lock:
            task = self._task_for(req.task_id, req.session_id, req.container_id)
            if not isinstance(task, Task):
                return task
            if req.pid is not None:
                task.status.pid = req.pid
            task.last_heartbeat = time.time()
            if req.restored and s.store.restored(task.id, task.session_id, req.restored):
                s.warnings_changed()
            s.set_task_state(task, TaskState.RUNNING, pid=task.status.pid,
                             **({"at": req.at} if req.at is not None else {}))
            if all(t.status.state == TaskState.RUNNING for t in s.tasks.values()):
                # Every task has restored its checkpoint: earlier copies are no longer needed.
                keep = {t.container.id for t in s.tasks.values()}
                threading.Thread(target=s.cluster.prune_checkpoints, args=(keep,), daemon=True).start()
            return 200, _ACK

    def result(self, req: Result) -> tuple[int, Ack | Stop]:
        s = self.state
        with s.lock:
            task = self._task_for(req.task_id, req.session_id, req.container_id)
            if not isinstance(task, Task):
                return task
            # Decisions belong to the monitor thread; a handler only records and wakes it.
            task.reported = (req.exit_code, req.diagnostics or "")
            task.exited_at = req.at
            s.cond.notify_all()
            return 200, _ACK

    # ---------------------------------------------------------------- an elastic job's agents
    # The rendezvous keeps its own lock (a store read may wait): these handlers take the AM's
    # lock only to record a formed round.
    def _elastic(self) -> ElasticPart:
        """The job's elastic part; RendezvousClosed for a fixed job, which has no rendezvous."""
        if self.state.elastic is None:
            raise RendezvousClosed("this job is not elastic: it has no rendezvous")
        return self.state.elastic

    def rdzv_state(self, q: StateQuery) -> tuple[int, RendezvousState | Stop]:
        try:
            rdzv = self._elastic().rendezvous
            state, token = rdzv.get_state(q.run_id)
            dead = rdzv.dead(q.run_id)
        except RendezvousClosed as e:
            return _stop(str(e))
        return 200, {"state": _text(state), "token": token, "written": False, "dead": dead}

    def rdzv_set_state(self, req: SetState) -> tuple[int, RendezvousState | Problem | Stop]:
        try:
            rdzv = self._elastic().rendezvous
            state, token, written = rdzv.set_state(req.run_id, _bytes(req.state), req.token)
            dead = rdzv.dead(req.run_id)
        except RendezvousClosed as e:
            return _stop(str(e))
        except ValueError as e:
            return 400, {"error": str(e)}
        return 200, {"state": _text(state), "token": token, "written": written, "dead": dead}

    def rdzv_store(self, req: StoreOp) -> tuple[int, StoreReply | Problem | Stop]:
        if not all(isinstance(k, str) for k in req.keys) or not all(isinstance(v, str) for v in req.values):
            return 400, {"error": "a store operation's keys and values are lists of text"}
        try:
            rdzv = self._elastic().rendezvous
            values, count, ok = rdzv.store(req.run_id, req.op, req.keys, [_bytes(v) for v in req.values],
                                           req.amount, req.wait)
            dead = rdzv.dead(req.run_id)
        except RendezvousClosed as e:
            return _stop(str(e))
        except ValueError as e:  # BadStoreOp, or a value that is not base64
            return 400, {"error": str(e)}
        return 200, {"values": [_text(v) for v in values], "count": count, "ok": ok, "dead": dead}

    def rdzv_round(self, req: RendezvousRound) -> tuple[int, Ack | Problem | Stop]:
        s = self.state
        with s.lock:
            task = self._task_for(req.task_id, req.session_id)
            if not isinstance(task, Task):
                return task
        try:
            elastic = self._elastic()
            formed = elastic.rendezvous.joined(req.run_id, req.round, req.task_id, req.rank, req.world_size)
        except RendezvousClosed as e:
            return _stop(str(e))
        except BadStoreOp as e:
            return 400, {"error": str(e)}
        with s.lock:
            elastic.joined_round(task, formed, req.node)
        return 200, _ACK

    def rdzv_group(self, req: GroupRequest) -> tuple[int, GroupReply | Problem | Stop]:
        s = self.state
        try:
            elastic = self._elastic()
        except RendezvousClosed as e:
            return _stop(str(e))
        with s.lock:
            task = self._task_for(req.task_id, req.session_id)
            if not isinstance(task, Task):
                return task
            if req.op == "join":  # named before it has a place: if it dies waiting, it leaves the queue
                elastic.trainers[task.container.id] = req.node
            if req.op == "suspect":  # its collective failed: the AM looks for a lost member now
                elastic.collective_failed(task, req.generation)
                return 200, {"changed": False}
        try:
            if req.op == "watch":
                return 200, elastic.rendezvous.watch(req.run_id, req.generation, req.wait)  # type: ignore[return-value]
            if req.op != "join":
                return 400, {"error": f"unknown group operation {req.op!r}: join, watch or suspect"}
            place = elastic.rendezvous.gather(req.run_id, req.task_id, req.node, req.generation, req.wait)
        except (RendezvousClosed, BadStoreOp) as e:  # another session's, or a trainer named gone
            return _stop(str(e))
        with s.lock:
            if place is None:
                return 200, {"formed": False}
            # Recorded by whichever member's answer comes first: the group's size from now on, and
            # every member as joined (the others' answers are on their way).
            for formed in elastic.rendezvous.formed_rounds():
                for member in formed.members:
                    if (t := s.tasks.get(member)) is not None and t.container.id in elastic.trainers:
                        elastic.joined[t.container.id] = elastic.trainers[t.container.id]
                elastic.joined_round(task, formed, req.node)
            elastic.joined_round(task, None, req.node)
        return 200, {"formed": True, **place}  # type: ignore[return-value]

    # ---------------------------------------------------------------- the chief and clients
    def tensorboard(self, req: TensorBoard) -> tuple[int, Ack | Problem]:
        return self._link("tensorboard", "TensorBoard", req.url, self.state.cluster.expose_tensorboard)

    def notebook(self, req: Notebook) -> tuple[int, Ack | Problem]:
        return self._link("notebook", "notebook", req.url)

    def _link(self, name: str, what: str, given: str,
              shown: Callable[[str], str | None] = lambda url: None) -> tuple[int, Ack | Problem]:
        """Keeps ``given`` (or ``shown(given)``, how the cluster shows it) as the status's ``<name>_url``. It
        becomes a link in the tracking page and the workflow UIs: a web address, nothing else."""
        parts = urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return 400, {"error": f"a {what} URL must be an http(s) address, got {given[:200]!r}"}
        url = shown(given) or given
        s = self.state
        with s.lock:
            setattr(s.status, f"{name}_url", url)
            s.events.emit(name, url=url)
            s.publish()
        return 200, _ACK

    def kill(self, req: Kill) -> tuple[int, Ack]:
        with self.state.lock:
            self.state.request_kill(req.reason or "killed by user")
        return 200, _ACK


def _bytes(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError(f"not base64: {text[:40]!r}") from None


def _text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")
