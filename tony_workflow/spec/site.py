"""The embedded local cluster's own settings: what the machine offers to jobs, and how jobs start.

They come from the site configuration (``$TONY_CONF_DIR/tony-site.xml``), never from a job: a job
that could set ``tony.local.memory`` could be placed on memory the machine does not have, and a job
that could widen ``tony.local.env-whitelist`` could read its submitter's secrets. The client reads
them once at submission and writes them beside the job, so its ApplicationMaster (and every later
attempt of it) works with the same inventory the client checked the job against.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from .errors import SpecError, SpecIssue
from .keys import LOCAL_CLUSTER_DEFAULTS
from .loading import site_conf, site_path
from .values import optional, parse_bool, parse_int, parse_list, parse_local_gpus, parse_memory, parse_oversubscription

__all__ = ["LocalCapacity", "LocalSettings", "is_tony_home", "local_settings"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class LocalCapacity:
    """What the embedded cluster may hand out: ``memory_mb``, ``vcores`` and ``gpus`` (GPU indices)
    are None where the machine is to be asked; ``oversubscription`` is how many task vcores share
    one core."""

    memory_mb: int | None
    vcores: int | None
    gpus: tuple[int, ...] | None
    oversubscription: float


@dataclass(frozen=True)
class LocalSettings:
    """The local cluster's settings (``tony.local.*``), typed."""

    capacity: LocalCapacity
    fork_server: bool
    env_whitelist: tuple[str, ...]
    #: seconds a finished job's directory is kept; 0: forever
    retention_s: int = 7 * 86400
    #: whether a container over its memory is killed (:mod:`tony_workflow.backends.local.memory`)
    pmem_check: bool = True
    #: how often containers' memory is measured
    monitor_interval_ms: int = 3000
    #: the least memory a container is given: a smaller request is raised to it, as YARN's
    #: scheduler does with yarn.scheduler.minimum-allocation-mb
    minimum_mb: int = 128

    @classmethod
    def from_conf(cls, conf: Mapping[str, str], source: str | None = None) -> LocalSettings:
        """Settings from ``tony.local.*`` keys over their defaults; SpecError naming every bad key
        (an unknown ``tony.local.*`` key is one: a typo would leave the machine's size detected)."""
        issues: list[SpecIssue] = []
        values = {**LOCAL_CLUSTER_DEFAULTS, **{k: v for k, v in conf.items() if k.startswith("tony.local.")}}

        def typed(key: str, parse: Callable[[str], _T]) -> _T | None:
            try:
                return parse(values[key])
            except ValueError as exc:
                issues.append(SpecIssue(key, values[key], str(exc), source))
                return None

        for key in values:
            if key not in LOCAL_CLUSTER_DEFAULTS:
                close = difflib.get_close_matches(key, list(LOCAL_CLUSTER_DEFAULTS), n=1, cutoff=0.75)
                hint = f" (did you mean {close[0]}?)" if close else ""
                issues.append(SpecIssue(key, None, f"unknown key{hint}: the local cluster's settings are "
                                        + ", ".join(LOCAL_CLUSTER_DEFAULTS), source))
        gpus = typed("tony.local.gpus", parse_local_gpus)
        memory_mb = typed("tony.local.memory", optional(parse_memory))
        vcores = typed("tony.local.vcores", optional(lambda v: parse_int(v, 1)))
        gpu_indices = _gpu_indices(gpus) if gpus is not None else None
        oversubscription = typed("tony.local.vcore-oversubscription", parse_oversubscription)
        fork_server = typed("tony.local.fork-server", parse_bool)
        retention = typed("tony.local.retention-sec", lambda v: parse_int(v, 0))
        pmem_check = typed("tony.local.pmem-check-enabled", parse_bool)
        interval = typed("tony.local.container-monitor-interval-ms", lambda v: parse_int(v, 100))
        minimum = typed("tony.local.minimum-allocation-mb", lambda v: parse_int(v, 1))
        whitelist = tuple(parse_list(values["tony.local.env-whitelist"]))
        bad = [p for p in whitelist if not _whitelist_entry_ok(p)]
        if bad:
            issues.append(SpecIssue("tony.local.env-whitelist", ",".join(bad),
                                    "entries are variable names, or a name prefix followed by '*'", source))
        if issues:
            raise SpecError(issues)
        # typed() gives None only with an issue recorded, and every issue was raised just above.
        assert oversubscription is not None and retention is not None and interval is not None
        assert minimum is not None
        capacity = LocalCapacity(memory_mb=memory_mb, vcores=vcores, gpus=gpu_indices,
                                 oversubscription=oversubscription)
        return cls(capacity, bool(fork_server), whitelist, retention, bool(pmem_check), interval, minimum)

    def inherited_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The part of ``environ`` that the whitelist lets a local job inherit from its submitter."""
        names = {p for p in self.env_whitelist if not p.endswith("*")}
        prefixes = tuple(p[:-1] for p in self.env_whitelist if p.endswith("*"))
        return {k: v for k, v in environ.items() if k in names or (prefixes and k.startswith(prefixes))}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LocalSettings:
        cap = dict(data["capacity"])
        if cap.get("gpus") is not None:
            cap["gpus"] = tuple(cap["gpus"])
        return cls(LocalCapacity(**cap), bool(data["fork_server"]), tuple(data["env_whitelist"]),
                   int(data.get("retention_s", 7 * 86400)), bool(data.get("pmem_check", True)),
                   int(data.get("monitor_interval_ms", 3000)), int(data.get("minimum_mb", 128)))


def _gpu_indices(text: str) -> tuple[int, ...] | None:
    """``tony.local.gpus`` as indices: empty asks nvidia-smi (None), a count means 0..n-1."""
    if not text:
        return None
    if "," in text:
        return tuple(int(g) for g in text.split(",") if g.strip())
    return tuple(range(int(text)))


def _whitelist_entry_ok(entry: str) -> bool:
    name = entry.removesuffix("*")
    return bool(name) and all(c.isalnum() or c == "_" for c in name)


def tony_home() -> Path:
    """Where this machine's tony-workflow state lives (``$TONY_HOME``, default ``~/.tony``): the
    embedded cluster's books and jobs, the local job history."""
    return Path(os.environ.get("TONY_HOME") or Path.home() / ".tony").expanduser()


def is_tony_home(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is this machine's tony-workflow state (:func:`tony_home`): a job's source
    directory may hold it (``src_dir: .`` in a home directory with its ``~/.tony``), but it is never
    part of the job, and copying it into a job staged inside it would never end."""
    return Path(path).resolve() == tony_home().resolve()


def local_settings(conf_dir: str | os.PathLike[str] | None = None) -> LocalSettings:
    """The local cluster's settings from ``tony-site.xml`` in ``conf_dir`` (default
    ``$TONY_CONF_DIR``), or the defaults where there is none."""
    path = site_path(conf_dir)
    conf = site_conf(conf_dir)
    return LocalSettings.from_conf(conf, source=str(path) if path else None)
