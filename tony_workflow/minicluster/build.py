"""Java and the Hadoop jars: finding a JDK, fetching the jars with Maven, compiling the launcher.

This is the mini cluster's bottom layer, so it also holds what every other part of it shares
(:data:`HADOOP_VERSION`, :class:`MiniClusterError`). Nothing here knows about a cluster's
directory: the jars and the compiled launcher are a cache shared by every cluster on the machine,
filled once under a file lock and marked complete by a stamp holding the hash of what they were
made from (the pom, the launcher's source), so that an interrupted fill or a changed source is
simply done again.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ClusterError
from ..process import file_lock

__all__ = [
    "HADOOP_VERSION",
    "JAVA_MODULE_OPTIONS",
    "Java",
    "MiniClusterError",
    "Progress",
    "ensure_hadoop_jars",
    "ensure_launcher_classes",
    "find_java",
    "hadoop_lib_dir",
]

HADOOP_VERSION = "3.5.0"

# The pom and the launcher's source are package data next to this module.
_SOURCES = Path(__file__).parent
_POM = _SOURCES / "pom.xml"
_JAVA = _SOURCES / "src" / "main" / "java"
_MAIN_SOURCE = _JAVA / "tonyworkflow" / "minicluster" / "MiniClusterMain.java"
#: compiled with the launcher, first on the daemons' classpath: Hadoop's secure reads of a
#: container's files made without its native library (see the class)
_STAND_INS = (_JAVA / "org" / "apache" / "hadoop" / "io" / "SecureIOUtils.java",)
MAIN_CLASS = "tonyworkflow.minicluster.MiniClusterMain"
_JARS_STAMP = ".tony-pom-sha256"

# Hadoop's own list for running on Java 17 (hadoop-project's extraJavaTestArgs): its RPC, web and
# security code reflects into these packages.
JAVA_MODULE_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in (
        "java.io", "java.lang", "java.lang.reflect", "java.math", "java.net", "java.text", "java.util",
        "java.util.concurrent", "java.util.zip", "sun.security.util", "sun.security.x509")),
)

Progress = Callable[[str], None]


class MiniClusterError(ClusterError):
    """A cluster could not be started or stopped; the message says why and what to do."""


def quiet(_: str) -> None:
    """The default :data:`Progress`: says nothing."""


@dataclass(frozen=True)
class Java:
    home: Path
    java: Path
    javac: Path | None
    version: int


def find_java() -> Java:
    """The JDK to run Hadoop with: ``$JAVA_HOME``, else the ``java`` on PATH. Hadoop 3.5 needs 17+."""
    home_env = os.environ.get("JAVA_HOME")
    if home_env:
        java = Path(home_env) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise MiniClusterError(f"JAVA_HOME is {home_env}, but {java} is not an executable; "
                                   "point JAVA_HOME at a JDK 17 or newer")
    else:
        found = shutil.which("java")
        if not found:
            raise MiniClusterError("no Java found: install a JDK 17 or newer, or set JAVA_HOME")
        java = Path(os.path.realpath(found))
    home = java.parent.parent
    try:
        out = subprocess.run([str(java), "-XshowSettings:properties", "-version"], capture_output=True,
                             text=True, timeout=60, check=False).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MiniClusterError(f"cannot run {java}: {e}") from None
    m = re.search(r"java\.specification\.version = (\d+)(?:\.(\d+))?", out)
    if not m:
        raise MiniClusterError(f"cannot tell which Java {java} is; its output was:\n{out.strip()[-1000:]}")
    version = int(m.group(2)) if m.group(1) == "1" else int(m.group(1))
    if version < 17:
        raise MiniClusterError(f"Hadoop {HADOOP_VERSION} needs Java 17 or newer, but {java} is Java {version}; "
                               "set JAVA_HOME to a newer JDK")
    javac = home / "bin" / "javac"
    return Java(home=home, java=java, javac=javac if os.access(javac, os.X_OK) else None, version=version)


def hadoop_lib_dir() -> Path:
    """Where the Hadoop jars are cached: ``$TONY_HADOOP_LIB``, else
    ``~/.cache/tony-workflow/hadoop-3.5.0`` (under ``$XDG_CACHE_HOME`` when that is set)."""
    if os.environ.get("TONY_HADOOP_LIB"):
        return Path(os.environ["TONY_HADOOP_LIB"]).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return (cache / "tony-workflow" / f"hadoop-{HADOOP_VERSION}").resolve()


def _sha256(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()




def tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of ``text``: the part of a tool's output that says what failed."""
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_hadoop_jars(lib: Path | None = None, *, progress: Progress = quiet) -> Path:
    """Fills ``lib`` with the jars the pom names (Maven's ``dependency:copy-dependencies``), once:
    a stamp with the pom's hash marks a complete copy, so an interrupted download or a changed pom
    is fetched again."""
    lib = lib or hadoop_lib_dir()
    stamp = lib / _JARS_STAMP
    want = _sha256(_POM)
    if stamp.is_file() and stamp.read_text().strip() == want:
        return lib
    with file_lock(lib / ".lock"):
        if stamp.is_file() and stamp.read_text().strip() == want:
            return lib
        mvn = shutil.which("mvn")
        if not mvn:
            raise MiniClusterError(
                f"Maven ('mvn') is needed once to fetch the Hadoop {HADOOP_VERSION} jars into {lib}; install it "
                "(it must reach Maven Central), or set TONY_HADOOP_LIB to a cache filled on another machine")
        for old in lib.glob("*.jar"):
            old.unlink()
        build = lib / ".build"
        build.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_POM, build / "pom.xml")
        progress(f"fetching the Hadoop {HADOOP_VERSION} jars with Maven into {lib} (once)")
        cmd = [mvn, "-q", "-B", "-f", str(build / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=build, check=False)
        except subprocess.TimeoutExpired:
            raise MiniClusterError("Maven did not finish fetching the Hadoop jars within 30 minutes") from None
        if done.returncode != 0 or not list(lib.glob(f"hadoop-minicluster-{HADOOP_VERSION}*.jar")):
            raise MiniClusterError(
                f"Maven could not fetch the Hadoop {HADOOP_VERSION} jars (exit {done.returncode}); is Maven Central "
                f"reachable?\n$ {shlex.join(cmd)}\n{tail(done.stdout + done.stderr)}")
        stamp.write_text(want + "\n")
    return lib


def ensure_launcher_classes(lib: Path, java: Java, *, progress: Progress = quiet) -> Path:
    """Compiles the launcher class (and its stand-ins) next to the jars, once per version of their
    sources."""
    classes = lib / "classes"
    stamp = classes / ".source-sha256"
    want = _sha256(_MAIN_SOURCE, *_STAND_INS)
    if stamp.is_file() and stamp.read_text().strip() == want:
        return classes
    with file_lock(lib / ".lock"):
        if stamp.is_file() and stamp.read_text().strip() == want:
            return classes
        if java.javac is None:
            raise MiniClusterError(f"{java.home} is a JRE without javac; the mini cluster needs a JDK 17 or newer "
                                   "(set JAVA_HOME to one)")
        progress("compiling the mini cluster launcher")
        part = lib / "classes.part"
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        done = subprocess.run([str(java.javac), "-nowarn", "-XDignore.symbol.file", "-d", str(part),
                               "-cp", str(lib / "*"), str(_MAIN_SOURCE), *map(str, _STAND_INS)],
                              capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise MiniClusterError(f"javac could not compile {_MAIN_SOURCE.name} against {lib}:\n"
                                   f"{tail(done.stdout + done.stderr)}")
        (part / ".source-sha256").write_text(want + "\n")
        shutil.rmtree(classes, ignore_errors=True)
        os.replace(part, classes)
    return classes
