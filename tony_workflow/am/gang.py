"""The ApplicationMaster's account of its gang: what it waits for and why, and when to give back.

A session's gang is every container the job needs at once. The cluster manager says why it is not
whole (:class:`~tony_workflow.backends.base.Wait`): before the job may ask (its turn in the queue
has not come, or the room is not there) and while containers come. :class:`GangWatch` keeps what
the status shows of it (containers held and wanted, the reason, since when, the jobs ahead), and
decides with TonY's and this project's keys:

- ``tony.container.allocation.timeout`` (TonY's, ms; <= 0: none): a session whose gang is not whole
  this long after the job first asked for it fails the job;
- ``tony.am.startup-timeout`` (TonY's, ms; 0: none), where the AM's own container comes with the
  first gang (the embedded cluster: :attr:`~tony_workflow.backends.base.ClusterManager.am_waits_with_gang`):
  a job whose first gang is not whole this long after its submission has, in YARN's terms, not
  started its AM, and fails (on YARN the gate applies it, before the AM starts);
- ``tony.gang.hold-timeout-ms``: a gang held in part this long is given back, and asked for again
  after a back-off (``tony.gang.backoff-ms``, randomised, doubling) that keeps the job's place in
  its queue; so is a gang an older job of the queue needs the room of (the cluster manager says
  so with :attr:`~tony_workflow.backends.base.Wait.release`).

No process, no cluster: the AM feeds it and applies what it says.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable

from ..backends import Wait
from ..status import JobStatus

__all__ = ["AllocationTimeout", "GangWatch"]


class AllocationTimeout(Exception):
    """The gang was not whole within tony.container.allocation.timeout (or the first one within
    tony.am.startup-timeout): the job fails."""


class GangWatch:
    """One job's gang as the AM sees it. ``clock`` is the wall clock (times shown to users)."""

    def __init__(self, allocation_timeout_ms: int, hold_timeout_ms: int, backoff_ms: int,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None):
        self.allocation_timeout_s = allocation_timeout_ms / 1000.0 if allocation_timeout_ms > 0 else None
        self.hold_timeout_s = hold_timeout_ms / 1000.0 if hold_timeout_ms > 0 else None
        self.backoff_s = backoff_ms / 1000.0
        self.clock = clock
        self.rng = rng or random.Random()
        self.wanted = 0
        self.held = 0
        self.reason: str | None = None
        self.since: float | None = None          # when the current wait began
        self.ahead: tuple[str, ...] = ()
        self.session_began: float | None = None  # when this session's gang was first asked for
        self.asked_at: float | None = None       # when the containers of this try were asked for
        self.formed = False
        self.releases = 0
        #: with tony.am.startup-timeout where it applies here: (the job's start, the limit in s)
        self.startup: tuple[float, float] | None = None

    # ------------------------------------------------------------------ feeding it
    def begin(self, wanted: int, held: int = 1, since: float | None = None) -> None:
        """A session's gang is about to be allocated: ``wanted`` containers, ``held`` of them
        already (the AM's own); ``since``: when the job began to wait for it, if before now."""
        self.wanted, self.held = wanted, held
        if since is not None:
            self.since = since
        self.session_began = since if since is not None else self.clock()
        self.asked_at = None
        self.formed = False

    def waiting(self, wait: Wait | None) -> bool:
        """The cluster's latest word; True when what a user sees changed."""
        reason = wait.reason if wait is not None else None
        ahead = wait.ahead if wait is not None else ()
        if reason and self.since is None:
            self.since = self.clock()
        changed = (reason, ahead) != (self.reason, self.ahead)
        self.reason, self.ahead = reason, ahead
        return changed

    def asked(self) -> None:
        """The containers of this try were asked of the cluster: the hold clock starts."""
        self.asked_at = self.clock()

    def granted(self, held: int, wanted: int) -> bool:
        """``held`` of ``wanted`` containers are granted; True when what a user sees changed."""
        changed = (held, wanted) != (self.held, self.wanted)
        self.held, self.wanted = held, wanted
        return changed

    def whole(self) -> float | None:
        """The gang is whole: the wait is over. Returns how long it lasted (None if there was none)."""
        waited = None if self.since is None else self.clock() - self.since
        self.formed, self.startup = True, None  # started: the limit no longer applies
        self.reason, self.since, self.ahead, self.asked_at = None, None, (), None
        self.held = self.wanted
        return waited

    # ------------------------------------------------------------------ deciding
    def overdue(self) -> None:
        """Raises :class:`AllocationTimeout` when tony.container.allocation.timeout has passed
        since the session first asked for its gang, and the gang is still not whole."""
        if self.startup is not None and not self.formed and self.clock() - self.startup[0] > self.startup[1]:
            raise AllocationTimeout(f"the ApplicationMaster did not start within {self.startup[1] * 1000:.0f} ms "
                                    "(tony.am.startup-timeout): its container comes with the job's first gang, "
                                    f"which was not whole" + (f"; {self.reason}" if self.reason else ""))
        if self.formed or self.allocation_timeout_s is None or self.session_began is None:
            return
        waited = self.clock() - self.session_began
        if waited > self.allocation_timeout_s:
            raise AllocationTimeout(
                f"the job's {self.wanted} containers were not all granted within {self.allocation_timeout_s * 1000:.0f} ms "
                f"(tony.container.allocation.timeout): {self.held} were"
                + (f"; {self.reason}" if self.reason else ""))

    def give_back(self, wait: Wait | None) -> str | None:
        """Why the part of the gang held now must be given back, or None: an older job needs the
        room (``wait.release``), or it was held longer than tony.gang.hold-timeout-ms. Only while
        the gang forms: a gang that was whole once keeps what it has."""
        if self.formed or self.asked_at is None or self.held <= 1:
            return None
        if wait is not None and wait.release:
            return f"an older job of the queue needs the room first: {wait.reason}"
        if self.hold_timeout_s is not None and self.clock() - self.asked_at > self.hold_timeout_s:
            return (f"{self.held} of {self.wanted} containers held for {self.hold_timeout_s:g} s "
                    f"(tony.gang.hold-timeout-ms) without the rest" + (f": {wait.reason}" if wait else ""))
        return None

    def backoff(self) -> float:
        """Seconds to wait before asking again after a give-back: random between half and one and a
        half times tony.gang.backoff-ms, doubled with each give-back up to eight times."""
        self.releases += 1
        base = self.backoff_s * min(8, 2 ** (self.releases - 1))
        wait: float = base * self.rng.uniform(0.5, 1.5)
        return wait

    # ------------------------------------------------------------------ showing it
    def show(self, status: JobStatus) -> None:
        """Writes the wait into ``status`` (the AM holds its lock)."""
        status.containers_held, status.containers_wanted = self.held, self.wanted
        status.waiting_reason = self.reason
        status.waiting_since = self.since if self.reason else None
        status.jobs_ahead = list(self.ahead)
