"""A mini cluster whose containers cannot see what the submitting machine has installed.

The mini cluster runs on the submitting machine, so its containers would find this project, its
virtualenv and every package of the machine's Python where the client has them: a job that could
never start on a real cluster, whose nodes have nothing but a base Python, would pass here. An
isolated cluster's JVM (and with it every NodeManager and container) runs in a mount namespace of
its own (Linux's ``unshare --mount``), where an empty filesystem lies over each of
:func:`hidden_paths`: this project's tree, the virtualenv the client runs in, and the base
interpreter's own site-packages (and the user's). The base interpreter itself stays (the nodes'
``python3.<minor>``, first on the containers' PATH), as do the cluster's own files and Hadoop's.
"""
from __future__ import annotations

import shlex
import shutil
import site
import sys
import sysconfig
from pathlib import Path

from .build import MiniClusterError

__all__ = ["check_isolation", "hidden_paths", "isolate"]


def hidden_paths() -> list[Path]:
    """What an isolated cluster's containers must not see: the tree this package was loaded from
    (a source checkout, or the site-packages it is installed in), the client's virtualenv, and
    the site-packages of the base interpreter and of the user."""
    import tony_workflow

    package = Path(tony_workflow.__file__).resolve().parent
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    candidates = [package.parent, Path(sys.prefix)]
    candidates += [Path(sysconfig.get_paths(vars=base)[k]) for k in ("purelib", "platlib")]
    candidates.append(Path(site.getusersitepackages()))
    out: list[Path] = []
    for p in candidates:
        p = p.resolve()
        if p.is_dir() and p != Path(sys.base_prefix).resolve() and not any(p.is_relative_to(q) for q in out):
            out = [q for q in out if not q.is_relative_to(p)] + [p]
    return out


def check_isolation(directory: Path, hidden: list[Path]) -> None:
    """Raises MiniClusterError when the cluster cannot be isolated here: no ``unshare``, or its
    directory, Java or Hadoop's jars inside what its containers must not see."""
    if not shutil.which("unshare"):
        raise MiniClusterError("an isolated mini cluster needs util-linux's unshare (a mount namespace of its own)")
    for p in hidden:
        if directory.is_relative_to(p):
            raise MiniClusterError(f"an isolated mini cluster's directory cannot be inside {p}, which its "
                                   f"containers must not see: pick another than {directory}")


def isolate(cmd: list[str], env: dict[str, str], hidden: list[Path]) -> tuple[list[str], dict[str, str]]:
    """``cmd`` run in a mount namespace of its own, with an empty filesystem over each of
    ``hidden``, and the environment of a machine with nothing but a base Python: its interpreter
    first on PATH, no virtualenv, no Python path."""
    mounts = " && ".join(f"mount -t tmpfs -o size=64k,mode=755 tony-hidden {shlex.quote(str(p))}" for p in hidden)
    script = f'{mounts} && exec "$@"' if mounts else 'exec "$@"'
    env = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYENV_VERSION")}
    python_bin = Path(sys.base_prefix) / "bin"
    env["PATH"] = ":".join([str(python_bin), "/usr/local/bin", "/usr/bin", "/bin"])
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *cmd], env
