"""What TonY adds to a Horovod job's keys: outside its driver's debug mode
(``tony.horovod.driver.mode.debug``), one ``driver`` task of one vcore, untracked, running this
project's driver (:mod:`tony_workflow.horovod_driver`: Horovod's rendezvous server, which
``tony.horovod.mode.test`` fakes and ``tony.horovod.mode.test.fast.fail`` fails at once)."""
from __future__ import annotations

from collections.abc import Mapping

from .keys import INSTANCES_KEY
from .table import TONY_DEFAULTS
from .values import parse_bool

__all__ = ["DRIVER_COMMAND", "implied_keys"]

#: The driver task's command (a bare ``python`` is the job's interpreter in a task).
DRIVER_COMMAND = 'python -m tony_workflow.horovod_driver -w "$CLUSTER_WORKER_LIST"'


def _on(value: str | None) -> bool:
    """The key's boolean; one that is not a boolean is validation's to refuse, and adds nothing here."""
    try:
        return parse_bool(value or "false")
    except ValueError:
        return False


def implied_keys(conf: Mapping[str, str]) -> dict[str, str]:
    """The keys a Horovod job with task instances is given besides its own (none for another job)."""
    raw = {**TONY_DEFAULTS, **conf}
    if (raw.get("tony.application.framework") or "").strip().lower() != "horovod" or _on(
            raw.get("tony.horovod.driver.mode.debug")):
        return {}
    if not any(INSTANCES_KEY.match(k) and k != "tony.driver.instances" and (v or "").strip() not in ("", "0")
               for k, v in conf.items()):
        return {}
    fast = _on(raw.get("tony.horovod.mode.test.fast.fail"))
    test = " -t -p 9999" + (" -f" if fast else "") if fast or _on(raw.get("tony.horovod.mode.test")) else ""
    untracked = [t for t in (raw.get("tony.application.untracked.jobtypes") or "").split(",") if t.strip()]
    return {"tony.driver.instances": "1", "tony.driver.vcores": "1", "tony.driver.command": DRIVER_COMMAND + test,
            "tony.application.untracked.jobtypes": ",".join([*untracked, "driver"])}
