"""TonY's keys that this project does not honour, and what a job that sets one gets.

Every key of TonY's ``tony-default.xml`` and of its ``TonyConfigurationKeys`` is either read here
with TonY's meaning (:mod:`.table`, the model, the task keys) or listed below. A job that sets a
listed key to anything but TonY's default is

* refused at submission, naming the key and why, where the value would change how the job runs
  and running it without would give a different job than the one written (FCFS scheduling,
  TonY's stages, its Horovod driver, ...);
* or accepted with a warning in the job's status, naming the key, where the key configures a part
  of TonY that has no counterpart here (its history server and portal, its JVMs, the client's
  connection to Hadoop) and the job runs as written without it.

An existing ``tony.xml`` thus runs as it says or says why not. The key reference (docs/reference.md) lists
these keys with what happens (:func:`markdown`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .keys import TONY_XML_DEFAULTS

__all__ = ["NOT_HONOURED", "NotHonoured", "markdown", "not_honoured", "refusals", "warnings"]


@dataclass(frozen=True)
class NotHonoured:
    """``key`` (a name, or a pattern with ``<type>``/``<name>`` in it), whether setting it is
    ``refused`` (else warned about), and ``why``, said to the user."""

    key: str
    refused: bool
    why: str

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"<\w+>", "[A-Za-z0-9_-]+", re.escape(self.key)) + "$")


def _refuse(key: str, why: str) -> NotHonoured:
    return NotHonoured(key, True, why)


def _warn(key: str, why: str) -> NotHonoured:
    return NotHonoured(key, False, why)


_HISTORY = "a setting of TonY's history server; this project keeps each job's history itself (`tony history`)"
_PORTAL = "a setting of TonY's portal (its web UI); jobs are shown by `tony` and the Airflow and Azkaban pages"
_JVM = "TonY's ApplicationMaster and executors are JVMs; this project's are Python processes"
_HADOOP = ("the cluster's configuration comes from HADOOP_CONF_DIR (or the Airflow connection), and every "
           "container is given it")
_NO_EFFECT = "has no effect here"

NOT_HONOURED: tuple[NotHonoured, ...] = (
    _refuse("tony.application.distributed-mode", "only GANG (TonY's default) is done here: every job's tasks "
            "start together, as a gang; FCFS, each task starting as its container comes, is not"),
    _refuse("tony.application.placement-spec", "YARN placement constraints are not asked for here; "
            "tony.<type>.spread spreads a task type over the nodes"),
    _refuse("tony.containers.placement-spec", "YARN placement constraints are not asked for here; "
            "tony.<type>.spread spreads a task type over the nodes"),
    _refuse("tony.<type>.placement-spec", "YARN placement constraints are not asked for here; "
            "tony.<type>.spread spreads a task type over the nodes"),
    _refuse("tony.other.namenodes", "delegation tokens are obtained for the cluster's own file system only: "
            "the job could not read the other NameNodes"),
    _warn("tony.history.finished", _HISTORY),
    _warn("tony.history.intermediate", _HISTORY),
    _warn("tony.history.mover-interval-ms", _HISTORY),
    _warn("tony.history.purger-interval-ms", _HISTORY),
    _warn("tony.history.finished-dir-timezone", _HISTORY),
    _warn("tony.history.host", _HISTORY),
    _warn("tony.history.cache.max-entries", _HISTORY),
    _warn("tony.history.maxAppends", _HISTORY),
    _warn("tony.http.port", _PORTAL),
    _warn("tony.https.port", _PORTAL),
    _warn("tony.https.keystore.path", _PORTAL),
    _warn("tony.https.keystore.type", _PORTAL),
    _warn("tony.https.keystore.password", _PORTAL),
    _warn("tony.https.keystore.algorithm", _PORTAL),
    _warn("tony.portal.url", _PORTAL),
    _warn("tony.portal.cache.max-entries", _PORTAL),
    _warn("tony.secret.key", _PORTAL),
    _warn("tony.task.am.jvm.opts", _JVM),
    _warn("tony.task.executor.jvm.opts", _JVM),
    _warn("tony.task.default.jvm.opts", _JVM),
    _warn("tony.application.hdfs-conf-path", _HADOOP),
    _warn("tony.application.yarn-conf-path", _HADOOP),
    _warn("tony.application.mapred-conf-path", _HADOOP),
    _warn("tony.application.hadoop.location", _HADOOP),
    _warn("tony.application.hadoop.classpath", _HADOOP),
    _warn("tony.application.security.enabled", "security follows the cluster's own configuration "
          "(hadoop.security.authentication): delegation tokens are obtained where it asks for Kerberos"),
    _warn("tony.application.num-client-rm-connect-retries", "the client asks the ResourceManager through the "
          "cluster's own retry settings"),
    _warn("tony.am.wait-client-signal-stop-timeout-sec", "the ApplicationMaster ends by itself here, with no "
          "word from the client to wait for"),
    _warn("tony.task.executor.execution.error-message-max-depth", "a failed task's diagnostics are the tail of "
          "its stderr here"),
    _warn("tony.task.executor.registry-timeout-sec", "executors register with the ApplicationMaster within "
          "tony.container.registration.timeout here"),
    _warn("tony.gpu-exec-path", "GPUs are found and measured through NVML here, not nvidia-smi"),
    _warn("tony.python-exec-path", "the interpreter is python_binary_path, or python_venv's"),
    _warn("tony.application.docker.enabled", "an older spelling: containers run in Docker with tony.docker.enabled"),
    _warn("tony.application.docker.image", "an older spelling: Docker images are tony.docker.containers.image "
          "and tony.docker.<type>.image"),
    _warn("tony.init.module", _NO_EFFECT),
    _warn("tony.chief.name", "the chief is the task type 'chief' (else worker 0) here"),
    _warn("tony.chief.index", "the chief is the task type 'chief' (else worker 0) here"),
    _warn("tony.evaluator.run-alone.timeout", _NO_EFFECT),
    _warn("tony.application.reserve.port.python.process.wait.seconds", "a task's ports are held by its executor "
          "until the user's process starts"),
)

_PLAIN = {n.key: n for n in NOT_HONOURED if "<" not in n.key}
_PATTERNS = [n for n in NOT_HONOURED if "<" in n.key]
_FALSE = ("", "false", "0")


def not_honoured(key: str) -> NotHonoured | None:
    """The entry for ``key``, or None when the key is honoured (or no key of TonY's)."""
    return _PLAIN.get(key) or next((n for n in _PATTERNS if n.pattern.match(key)), None)


def _set(key: str, value: str | None) -> bool:
    """Whether ``value`` differs from TonY's default for ``key`` (unset, empty or false for keys
    without one in tony-default.xml)."""
    text = (value or "").strip()
    default = TONY_XML_DEFAULTS.get(key)
    if default is not None:
        return text.lower() != default.strip().lower()
    return text.lower() not in _FALSE


def refusals(conf: dict[str, str]) -> list[tuple[str, str, str]]:
    """(key, value, why) for every refused key ``conf`` sets."""
    out = []
    for key, value in conf.items():
        entry = not_honoured(key)
        if entry is not None and entry.refused and _set(key, value):
            out.append((key, value, f"not done by this project: {entry.why}"))
    return out


def warnings(conf: dict[str, str]) -> list[str]:
    """A line for every key ``conf`` sets that has no effect here."""
    return [f"{key}={value!r} has no effect: {entry.why}" for key, value in conf.items()
            if (entry := not_honoured(key)) is not None and not entry.refused and _set(key, value)]


def markdown() -> str:
    """The key reference's list of these keys."""
    lines = ["| TonY's key | when set | why |", "|---|---|---|"]
    for n in sorted(NOT_HONOURED, key=lambda n: (not n.refused, n.key)):
        lines.append(f"| `{n.key}` | {'refused' if n.refused else 'warning'} | {n.why.replace('|', chr(92) + '|')} |")
    return "\n".join(lines)
