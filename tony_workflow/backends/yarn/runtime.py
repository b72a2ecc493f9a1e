"""What a YARN job brings to nodes that have nothing installed: the runtime, and the job's
environment.

A NodeManager needs a base Python 3 of the client's minor version and nothing else. The AM, its
supervisor, the gate and the executors run from the *runtime archive*: this project's package and
the distributions they import (the project's own requirements and its ``yarn`` extra's, with
theirs: requests, psutil, skein, grpcio, pyhdfs, ...), never TensorFlow or torch, which only the
user's processes import, from the job's environment. The archive is built once per version of the
project and of those distributions (:func:`runtime_key`: a digest of the interpreter's minor
version and platform, every distribution's name and version, and the package's own files), kept
on the client under ``~/.cache/tony-workflow/runtime/``, and uploaded once to the user's HDFS cache
(:mod:`.ship`), where every later job names it.

On a node it is unpacked as ``runtime/``: ``runtime/tony`` holds the package, ``runtime/lib`` the
rest. The runtime's processes see both (:func:`runtime_path`); a task's own processes see only
``runtime/tony``, after their environment's paths (for ``tony_workflow.report`` and its callbacks),
so that the job's environment decides the version of everything else.

The job's environment is TonY's ``python_venv`` (a local zip or directory, or an ``hdfs://`` URI),
or, by default, what the job's source imports, packed from this client's installed distributions
one archive each (:mod:`.environment`), on the path of the task's processes, which run on the
node's base Python. The archives are built here too (:func:`_build`).
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ...protocol import SHIPPED_DATA_DIR

__all__ = ["RUNTIME_DIR", "Pack", "base_python", "is_built", "local_archives", "runtime",
           "runtime_key", "runtime_path", "task_path"]

log = logging.getLogger("tony.yarn")

#: Where a container finds the runtime (YARN unpacks archives there).
RUNTIME_DIR = "runtime"
#: The extras of this project whose requirements the runtime carries.
_EXTRAS = ("yarn",)
#: Files of the runtime's distributions that no container needs: skein's driver jar (the client
#: starts drivers; skein localizes its own jar for its master), compiled bytecode.
_SKIPPED = ("skein/java/", "__pycache__/", ".pyc")
_SKIPPED_PACKAGE_DIRS = ("__pycache__", "src")  # tony_workflow/minicluster/src: the mini cluster's Java


def base_python() -> str:
    """The interpreter a node runs the runtime with: ``python3.<minor>`` of this client's Python."""
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def runtime_path(root: str) -> str:
    """The runtime's processes' PYTHONPATH, the runtime unpacked in ``root``."""
    return f"{root}/{RUNTIME_DIR}/tony:{root}/{RUNTIME_DIR}/lib"


def task_path(root: str) -> str:
    """What a task's own processes add to their PYTHONPATH: this package alone."""
    return f"{root}/{RUNTIME_DIR}/tony"


@dataclass(frozen=True)
class Pack:
    """An archive built once and kept on this machine: its file, the key that names its content,
    its size, and how many distributions it holds."""

    path: Path
    key: str
    size: int
    distributions: int


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _closure(roots: Iterable[tuple[str, tuple[str, ...]]]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` ((requirement, extras) pairs) need, with what those
    need in turn, by canonical name; requirements not installed here are left out (an optional
    dependency of a dependency, say)."""
    from packaging.requirements import Requirement

    out: dict[str, metadata.Distribution] = {}
    todo = [(Requirement(text), extras) for text, extras in roots]
    while todo:
        req, extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (extras or ("",))):
            continue
        name = _canonical(req.name)
        if name in out:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        out[name] = dist
        todo.extend((Requirement(t), tuple(req.extras)) for t in dist.requires or [])
    return out


def _runtime_distributions() -> dict[str, metadata.Distribution]:
    try:
        own = metadata.distribution("tony-workflow").requires or []
    except metadata.PackageNotFoundError:  # a source tree run without an install: its declared needs
        own = ["requests", "jinja2", "pyyaml", "psutil", "nvidia-ml-py", "javaproperties", "tenacity", "skein",
               "pyhdfs"]
    dists = _closure((text, _EXTRAS) for text in own)
    dists.pop("tony-workflow", None)  # the package itself comes from its own directory
    return dists


def _package_files() -> Iterator[tuple[Path, str]]:
    """This package's files, as (path on disk, name in the archive under ``tony/``)."""
    root = Path(__file__).resolve().parents[2]  # tony_workflow/, from tony_workflow/backends/yarn/
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_PACKAGE_DIRS)
        for name in sorted(filenames):
            if name.endswith(".pyc"):
                continue
            path = Path(dirpath) / name
            yield path, f"tony/{root.name}/{path.relative_to(root).as_posix()}"


def _dist_files(dists: dict[str, metadata.Distribution], prefix: str) -> Iterator[tuple[Path, str]]:
    """Every installed file of ``dists`` inside their site-packages directory (not their scripts),
    and their data files under the environment's ``share/``, as ``SHIPPED_DATA_DIR/share/...``."""
    share = Path(sys.prefix).resolve() / "share"
    for dist in dists.values():
        for f in dist.files or []:
            rel = f.as_posix()
            if any(s in rel for s in _SKIPPED):
                continue
            path = Path(str(dist.locate_file(f)))
            if rel.startswith(".."):
                outside = Path(os.path.realpath(path))
                if not outside.is_relative_to(share) or not outside.is_file():
                    continue
                path, rel = outside, f"{SHIPPED_DATA_DIR}/share/{outside.relative_to(share).as_posix()}"
            if path.is_file():
                yield path, f"{prefix}{rel}"


def _digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def _platform() -> list[str]:
    return [f"py{sys.version_info.major}.{sys.version_info.minor}", sysconfig.get_platform(),
            sys.implementation.name]


def runtime_key(dists: dict[str, metadata.Distribution] | None = None) -> str:
    """What names the runtime's content: the interpreter, the platform, every distribution's name
    and version (``dists``, when the caller has them), and the package's own files (their names
    and bytes: a source tree being edited changes it)."""
    dists = _runtime_distributions() if dists is None else dists
    files = [f"{name}:{hashlib.sha256(path.read_bytes()).hexdigest()}" for path, name in _package_files()]
    return "runtime-" + _digest([*_platform(), *(f"{n}=={d.version}" for n, d in sorted(dists.items())), *files])


def _cache_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "tony-workflow" / "runtime"


def is_built(key: str, suffix: str = ".zip") -> bool:
    """Whether the archive named ``key`` is in this machine's cache."""
    return (_cache_dir() / f"{key}{suffix}").is_file()


def _build(key: str, files: Iterable[tuple[Path, str]], distributions: int, compress: bool = True) -> Pack:
    """The archive named ``key`` in this machine's cache, built from ``files`` if it is not there
    (written aside and renamed into place: builders at the same moment each write a whole one).
    ``compress``: deflated (quickly); an environment of gigabytes of shared libraries is stored
    as it is, since HDFS moves bytes faster than one core deflates them."""
    cache = _cache_dir()
    dest = cache / f"{key}.zip"
    if not dest.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".zip.tmp")
        os.close(fd)
        try:
            method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            with zipfile.ZipFile(tmp, "w", method, compresslevel=1 if compress else None) as zf:
                for path, name in files:
                    info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
                    info.external_attr = (path.stat().st_mode & 0o777) << 16
                    info.compress_type = method
                    info.file_size = path.stat().st_size  # lets zipfile pick ZIP64 for a big one
                    with open(path, "rb") as src, zf.open(info, "w") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, dest)
        finally:
            Path(tmp).unlink(missing_ok=True)
        log.info("built %s (%.1f MB, %d distributions)", dest.name, dest.stat().st_size / 1e6, distributions)
    return Pack(dest, key, dest.stat().st_size, distributions)


def runtime() -> Pack:
    """The runtime archive of this client's versions, built on first use."""
    dists = _runtime_distributions()
    key = runtime_key(dists)
    # Listed only if it is built: the distributions' files are thousands of paths to look at.
    return _build(key, itertools.chain(_package_files(), _dist_files(dists, "lib/")), len(dists))


def local_archives() -> list[Path]:
    """The archives this machine keeps (runtimes and environments, every version built here)."""
    cache = _cache_dir()
    return sorted([*cache.glob("*.zip"), *cache.glob("*.tar")]) if cache.is_dir() else []
