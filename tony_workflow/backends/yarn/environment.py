"""The job's environment on nodes that have nothing installed: what its own processes import,
packed from this client's installed distributions, one archive per distribution.

**What goes.** By default (``tony.yarn.environment=client``) a job brings what its source imports:
every ``.py`` file under ``src_dir`` is read for its absolute imports (its own modules and the
standard library left out), each imported module is traced to the installed distribution that
provides it, and those go with what they require; so do TensorBoard's distribution when the chief
runs TensorBoard, and the data reader's (the ``data`` extra) when the job declares inputs or imports
``tony_workflow.data``. ``tony.yarn.environment-packages`` adds distributions by name (``*``: every
installed one). An import no installed distribution provides is named at submission: the tasks
would fail on it. ``tony.yarn.environment=nodes`` ships nothing (the nodes' Python has what the job
needs), and TonY's ``python_venv`` replaces all of this.

**In parts.** Each distribution is its own archive, named by its content (:class:`Part`: its name,
version and installed files' record, and the interpreter and platform), built once on this
machine and uploaded once to the user's HDFS cache (:mod:`.ship`), where YARN localizes it and
NodeManagers keep it for the user's next jobs. A part is a tar file, not a zip: a NodeManager
unpacks a tar with the system's ``tar`` and a zip entry by entry in Java, which took two minutes
for TensorFlow's 20,000 files where ``tar`` takes seconds. A job whose environment changed in one distribution
uploads and localizes that one alone. On the node each part is unpacked in a directory of its own;
the executor joins them into one site directory of links before the task's processes start
(:func:`tony_workflow.task.workdir.join_parts`), which keeps every distribution's files where their
neighbours expect them (shared libraries found through ``$ORIGIN``-relative paths, namespace
packages).
"""
from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ...spec.notebook import is_notebook
from .app import Shipment
from .runtime import _cache_dir, _canonical, _closure, _dist_files, _platform, is_built
from .ship import Cache, UploadProgress, shipped

__all__ = ["EnvironmentPlan", "Part", "environment_plan", "imports_of", "part_of", "roots_of", "ship_environment"]

log = logging.getLogger("tony.ship")

#: Directories of a source tree not read for imports (tools' and environments' own files).
_SKIPPED_DIRS = {"__pycache__", ".git", ".venv", "venv", "site-packages", "node_modules", ".tox", ".mypy_cache"}
#: At most this many files of a source tree are read for imports, each at most this large.
_MAX_FILES, _MAX_FILE_BYTES = 5000, 2 << 20
#: What a part holds besides its site files, named in its key so that a part packed before is not
#: taken for one of this layout: 2, its data files under ``share/`` (protocol.SHIPPED_DATA_DIR).
_LAYOUT = "layout 2"
#: The time every member of a part carries (1980-01-01), so that its bytes depend on its files alone.
_EPOCH = 315532800
#: A distribution larger than this is said as it is packed (a few seconds).
_SAY_ABOVE = 50 << 20
#: This project's own distribution: the runtime brings its package, never the job's environment.
_OWN = "tony-workflow"
#: What of a distribution no running job reads, left out of its part: TensorFlow's C++ headers
#: (400 MB and 18,500 of its 20,500 files), which build custom ops ahead of time; TensorFlow
#: compiles nothing from them as it runs (torch.compile and Triton do, so theirs go).
_LEFT_OUT = {name: ("tensorflow/include/",) for name in
             ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")}


@dataclass(frozen=True)
class Part:
    """One distribution packed: ``key`` names its content (see the module's docstring)."""

    name: str
    version: str
    key: str
    path: Path
    size: int


@dataclass
class EnvironmentPlan:
    """What a job's environment is: its parts, why each root distribution is there, and the
    imports no installed distribution provides."""

    parts: list[Part] = field(default_factory=list)
    roots: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)


def _source_files(src_dir: Path) -> Iterator[Path]:
    count = 0
    for root, dirs, files in os.walk(src_dir, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith((".py", ".ipynb")):
                path = Path(root) / name
                try:
                    if path.stat().st_size > _MAX_FILE_BYTES:
                        continue
                except OSError:
                    continue
                count += 1
                if count > _MAX_FILES:
                    return
                yield path


def _notebook_code(path: Path) -> str:
    """A notebook's code cells as one Python text, IPython's magics and shell lines left out."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells") or []
    lines = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source") or ""
            text = "".join(source) if isinstance(source, list) else str(source)
            lines += [ln for ln in text.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def imports_of(src_dir: Path) -> dict[str, str]:
    """The modules the ``.py`` files and notebooks under ``src_dir`` import absolutely (``import a.b``,
    ``from a.b import c``), each with the file that first does: a file that does not parse is
    passed over (the task will say what is wrong with it)."""
    found: dict[str, str] = {}
    for path in _source_files(src_dir):
        try:
            tree = ast.parse(_notebook_code(path) if path.suffix == ".ipynb" else path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name, str(path.relative_to(src_dir)))
    return found


def _local_modules(src_dir: Path) -> set[str]:
    """The top-level names the source tree itself provides (its modules and packages), at its
    root and in the directories its files sit in (scripts import their neighbours)."""
    names: set[str] = set()
    for path in _source_files(src_dir):
        names.add(path.stem)
        for parent in path.relative_to(src_dir).parents:
            if parent.name:
                names.add(parent.parts[0])
    for entry in src_dir.iterdir() if src_dir.is_dir() else ():
        if entry.is_dir():
            names.add(entry.name)
    return names


def _extra_requirements(extra: str) -> list[str]:
    """The names of the distributions this project's ``extra`` asks for (on this interpreter)."""
    from packaging.requirements import Requirement
    try:
        own = metadata.distribution(_OWN).requires or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for text in own:
        req = Requirement(text)
        if req.marker is not None and req.marker.evaluate({"extra": extra}) \
                and not req.marker.evaluate({"extra": ""}):
            out.append(req.name)
    return out


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _installed_fingerprint() -> str:
    """What names this interpreter's installed distributions as :func:`_packages` reads them:
    every metadata directory on ``sys.path`` with the times its directory and its ``RECORD`` were
    written (an install, an upgrade or an uninstall changes them). A few hundred ``stat`` calls."""
    h = hashlib.sha256()
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as listing:
                names = sorted(e.name for e in listing if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        h.update(f"{entry}\0".encode())
        for name in names:
            path = os.path.join(entry or ".", name)
            stamps = []
            for p in (path, os.path.join(path, "RECORD")):
                try:
                    stamps.append(os.stat(p).st_mtime_ns)
                except OSError:
                    stamps.append(-1)
            h.update(f"{name}:{stamps}\0".encode())
    return h.hexdigest()[:24]


def _packages() -> dict[str, list[str]]:
    """Which installed distributions provide each top-level module (as
    ``importlib.metadata.packages_distributions`` says, which reads every distribution's files:
    more than a second on a machine with TensorFlow), kept in this machine's cache for as long as
    the installed distributions stay the same."""
    import json
    memo = _cache_dir() / f"packages-{hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]}.json"
    fingerprint = _installed_fingerprint()
    try:
        kept = json.loads(memo.read_text())
        if kept.get("fingerprint") == fingerprint:
            return dict(kept["packages"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    provided = dict(metadata.packages_distributions())
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, suffix=".json.tmp")
        with os.fdopen(fd, "w") as out:
            json.dump({"fingerprint": fingerprint, "packages": provided}, out)
        os.replace(tmp, memo)
    except OSError:  # a cache that cannot be written: the next submission reads the files again
        pass
    return provided


def roots_of(spec: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The distributions the job needs by itself, each with why (name -> reason), and the imports
    no installed distribution provides (module -> the file importing it)."""
    roots: dict[str, str] = {}
    missing: dict[str, str] = {}
    src = Path(spec.src_dir) if spec.src_dir else None
    imported = imports_of(src) if src is not None and src.is_dir() else {}
    local = _local_modules(src) if src is not None and src.is_dir() else set()
    provided = _packages()
    wants_data = bool(spec.data_inputs)
    for module, where in sorted(imported.items()):
        top = module.split(".", 1)[0]
        if top in local or top in sys.stdlib_module_names or top == "__future__":
            continue
        if top == "tony_workflow":
            wants_data = wants_data or module == "tony_workflow.data" or module.startswith("tony_workflow.data.")
            continue
        dists = provided.get(top)
        if not dists:
            missing.setdefault(top, where)
            continue
        for dist in dists:
            roots.setdefault(_canonical(dist), f"{where} imports {top}")
    if spec.tensorboard_enabled and spec.framework in ("tensorflow", "pytorch", "jax") and _installed("tensorboard"):
        roots.setdefault("tensorboard", "the chief runs TensorBoard")
    if is_notebook(spec.executes):
        for name in _extra_requirements("notebook"):
            if _installed(name):
                roots.setdefault(_canonical(name), f"the job executes a notebook ({spec.executes.split()[0]})")
    if wants_data:
        for name in _extra_requirements("data"):
            if _installed(name):
                roots.setdefault(_canonical(name), "the job reads its inputs (tony_workflow.data)")
    for name in spec.yarn_environment_packages:
        if name != "*":
            roots.setdefault(_canonical(name), "tony.yarn.environment-packages names it")
    return roots, missing


def _record_digest(dist: metadata.Distribution, described: Any = None) -> str:
    """What a distribution's installed files are: its RECORD (each file's hash, written by the
    installer), else its files' names and sizes. ``described``: its metadata, when the caller has
    read it (each reading parses the file again)."""
    described = dist.metadata if described is None else described
    h = hashlib.sha256()
    for part in [*_platform(), _LAYOUT]:
        h.update(part.encode() + b"\0")
    h.update(f"{described['Name']}=={described['Version']}\0".encode())
    record = dist.read_text("RECORD")
    if record:
        h.update(record.encode())
    else:
        for f in dist.files or []:
            path = Path(str(dist.locate_file(f)))
            h.update(f"{f.as_posix()}:{path.stat().st_size if path.is_file() else -1}\0".encode())
    return h.hexdigest()[:16]


def part_of(name: str, dist: metadata.Distribution, say: Callable[[str], None] | None = None) -> Part:
    """The part of ``dist`` (``name``: its canonical name), packed on first use (said through
    ``say`` when that takes a while: a large distribution)."""
    described = dist.metadata
    version = described["Version"]
    left_out = _LEFT_OUT.get(name, ())
    key = f"env-{name}-{version}-{_record_digest(dist, described)}" + ("-lean" if left_out else "")
    if not is_built(key, ".tar"):  # listing a distribution's files takes seconds for TensorFlow's: only to pack it
        files = [(path, rel) for path, rel in _dist_files({name: dist}, "") if not rel.startswith(left_out)]
        size = sum(p.stat().st_size for p, _ in files)
        if say is not None and size > _SAY_ABOVE:
            say(f"packing {name} {version} ({_mb(size)}) into the job's environment, once")
        _pack(key, files)
    path = _cache_dir() / f"{key}.tar"
    return Part(name, str(version), key, path, path.stat().st_size)


def _pack(key: str, files: list[tuple[Path, str]]) -> Path:
    """The tar file named ``key`` in this machine's cache, written from ``files`` if it is not
    there (aside, then renamed into place: packers at the same moment each write a whole one).
    Its bytes depend on the files' names, modes and content alone."""
    cache = _cache_dir()
    dest = cache / f"{key}.tar"
    if dest.is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tar.tmp")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for path, name in sorted(files, key=lambda f: f[1]):
                with open(path, "rb") as fh:  # a file, even where the installed one is a link to it
                    info = tar.gettarinfo(arcname=name, fileobj=fh)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = _EPOCH
                    tar.addfile(info, fh)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest


def environment_plan(spec: Any, say: Callable[[str], None] | None = None) -> EnvironmentPlan:
    """The job's environment (see the module's docstring), its parts packed on this machine;
    ``say`` is told what takes a while."""
    roots, missing = roots_of(spec)
    if "*" in spec.yarn_environment_packages:
        dists = {_canonical(d.metadata["Name"]): d for d in metadata.distributions() if d.metadata["Name"]}
    else:
        dists = _closure((name, ()) for name in roots)
    dists.pop(_OWN, None)
    plan = EnvironmentPlan(roots=roots, missing=missing)
    plan.parts = [part_of(name, dist, say) for name, dist in sorted(dists.items())]
    return plan


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


def ship_environment(spec: Any, shipment: Shipment, cache: Cache | None) -> None:
    """Puts the job's environment in ``shipment``, part by part, each uploaded once to ``cache``,
    saying what goes, what is new and how far its upload has got."""
    say = log.info
    plan = environment_plan(spec, say)
    for module, where in sorted(plan.missing.items()):
        log.warning(f"{where} imports {module}, which no distribution installed here provides: the tasks will fail "
                    "to import it (install it where you submit from, or give the job a python_venv)")
    if not plan.parts:
        say("the job's environment: nothing beyond the standard library (its source imports nothing else)")
        return
    held = cache.has_each([(p.path, p.path.name, p.key) for p in plan.parts]) if cache else [False] * len(plan.parts)
    new = [p for p, there in zip(plan.parts, held) if not there]
    say(f"the job's environment: {len(plan.parts)} distributions, {_mb(plan.size)} ({', '.join(sorted(plan.roots))} "
        "and what they require); " + (f"{len(new)} to upload ({_mb(sum(p.size for p in new))}), the rest already "
                                      "in the cache" if new else "every one already in the cache"))
    started = time.monotonic()
    for part in plan.parts:
        name = f"env-{part.name}"
        # A large part's upload is followed as it goes; the small ones together, below.
        progress = UploadProgress(f"{part.name} {part.version}", part.size, say) \
            if part in new and part.size > _SAY_ABOVE else None
        shipment.files[name] = shipped(cache, part.path, "archive", digest=part.key, progress=progress)
        shipment.environment.append(name)
    if new:
        say(f"uploaded {len(new)} parts of the job's environment ({_mb(sum(p.size for p in new))}) in "
            f"{time.monotonic() - started:.0f} s; the next jobs find them in the cache")
