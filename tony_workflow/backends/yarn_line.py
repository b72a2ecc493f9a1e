"""A YARN job's view of the line it waits in: the ResourceManager's REST API read into
:mod:`.yarn_gang`'s verdict.

Used where the job asks for containers: by skein's master container before the job's own
ApplicationMaster is started (:mod:`.yarn_gate`), and by the ApplicationMaster before it asks for
its tasks' containers and while they come (:mod:`.yarn_am`). Three reads a look (the TonY
applications, the nodes, the scheduler's queue), a look every couple of seconds while a job
waits: a queue of a dozen waiting jobs asks the ResourceManager a few things a second.
"""
from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence

from .base import ContainerRequest
from .rm import AppReport, ResourceManager, RMError
from .yarn_gang import (
    Shape,
    Verdict,
    headroom_from,
    maximum_from,
    members_from,
    minimum_allocation,
    nodes_from,
    shape_of,
    verdict,
)

__all__ = ["LOOK_EVERY_S", "Line"]

log = logging.getLogger("tony.yarn")

#: How often a waiting job looks at its line (each look is spread by ±25 %, so that jobs started
#: together do not ask the ResourceManager in step).
LOOK_EVERY_S = 2.0


class Line:
    """Application ``app_id``'s place in its queue, read through ``rm`` (None: not readable from
    here; every look then says so, and the job asks without waiting its turn)."""

    def __init__(self, app_id: str, rm: ResourceManager | None, look_every_s: float = LOOK_EVERY_S):
        self.app_id = app_id
        self.rm = rm
        self.look_every_s = look_every_s
        self.minimum: tuple[int, int] = (1, 1)
        self.queue = ""
        #: the job's own report at the last look: how many containers YARN runs for it
        self.me: AppReport | None = None
        self.unreadable: str | None = None if rm is not None else (
            "the ResourceManager's REST API cannot be reached from this container")

    def pause(self) -> float:
        """Seconds until the next look."""
        return self.look_every_s * random.uniform(0.75, 1.25)

    def shape(self, request: ContainerRequest) -> Shape:
        """The container YARN grants for ``request`` (rounded up to the scheduler's minimum; the
        request's label is the one its container asks for)."""
        return shape_of(request.memory_mb, request.vcores, request.gpus, request.node_label, self.minimum)

    def look(self, pending: Sequence[ContainerRequest], counts: Mapping[str, tuple[int, int]]) -> Verdict | None:
        """Whether the job may ask for the containers of ``pending`` now (see
        :func:`.yarn_gang.verdict`; ``counts`` gives each task type's (held, wanted)); None when
        the ResourceManager cannot be read (:attr:`unreadable` says why)."""
        if self.rm is None:
            return None
        try:
            reports = self.rm.apps(tags=("tony",), states=("ACCEPTED", "RUNNING"))
            me = next((r for r in reports if r.id == self.app_id), None) or self.rm.app(self.app_id)
            if me is None:
                raise RMError(f"the ResourceManager does not know {self.app_id}")
            queue = self.rm.queue(me.queue)
            self.minimum, self.queue, self.me = minimum_allocation(queue), me.queue, me
            nodes = nodes_from(self.rm.nodes())
        except (RMError, ValueError, KeyError) as e:
            if self.unreadable is None:
                log.warning("%s: the line cannot be read (%s); asking without waiting for a turn", self.app_id, e)
            self.unreadable = str(e)
            return None
        self.unreadable = None
        shapes = [(r.task_id.split(":")[0], self.shape(r)) for r in pending]
        return verdict(self.app_id, me.priority, members_from(reports, me.queue), nodes, headroom_from(queue),
                       shapes, counts, queue=me.queue, maximum=maximum_from(queue))
