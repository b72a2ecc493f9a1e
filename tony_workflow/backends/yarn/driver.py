"""skein's Java driver: one per process for each cluster and login.

Only submitting a job needs the driver (following one needs no JVM: see
:mod:`tony_workflow.backends.yarn.rm`). A driver is a JVM of a few hundred MB, and an Airflow triggerer
may hold many backends of one cluster, so they share it (:func:`shared_driver`). Processes of
one user share it too: a process that starts a driver records where it listens in skein's
configuration directory (``$SKEIN_CONFIG``, else ``$TONY_HOME/skein``, which holds the certificate the
driver is reached with), and a later process for the same cluster and login connects to it
rather than starting a JVM of its own (a ``tony submit`` beside an Airflow worker, say). When
the owner exits its driver goes with it, and the next process starts one again.

**A driver kept for the next command.** A ``tony`` command lives for seconds, and a driver's JVM
takes seconds to start: the command (any front end that calls :func:`detach_drivers`) starts its
driver in a process of its own instead, detached from the command, which serves the user's next
commands until none has come for ``TONY_DRIVER_IDLE_S`` seconds (default 600; 0 keeps every
driver in the process that started it, as before). It is the user's alone: it is recorded in the
user's skein directory (mode 700) and reached with the user's skein certificate. Every use renews
its lease (the record's modification time); idle past it, it stops its JVM, removes its record and
exits, leaving nothing. On a Kerberized cluster a driver logged in from a ticket cache is not
used once that cache holds a newer ticket than the driver started with (``kinit`` again): it is
told to stop, and a new one starts with the new ticket.

On a Kerberized cluster the driver logs in as the backend's login: with a principal and keytab it
logs itself in (and renews from the keytab), else it takes the ticket ``kinit`` left in the cache
that ``KRB5CCNAME`` names. It is the driver that obtains the application's delegation tokens (HDFS,
the ResourceManager's), which YARN hands every container and renews while the job runs. Java
finds the KDC through ``java.security.krb5.conf``, not ``KRB5_CONFIG``, hence the option given to
the JVM.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ... import process
from ...errors import ClusterError, ConfigError
from ...kerberos import Login, is_secure
from ...spec.site import tony_home
from .skein_jar import driver_jar

__all__ = ["check_driver_can_start", "close_drivers", "detach_drivers", "driver_cause", "driver_running",
           "idle_seconds", "no_datanode_took", "shared_driver", "submit_application"]

# skein talks to its driver and to its ApplicationMaster over gRPC, which by default restarts its
# polling threads in every child this process forks. A child that then closes its descriptors
# before exec (subprocess with preexec_fn; an Airflow worker forking a task) kills that thread's
# epoll descriptor under it, and gRPC aborts the child. No channel is ever used across a fork here,
# so the children are spared that machinery. Read by gRPC when it starts: set before skein loads it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# skein keeps the user's certificate and key, and this module its drivers' records, in its
# configuration directory, by default ~/.skein. This machine's tony-workflow state holds it
# instead, with the rest of what tony writes (``$TONY_HOME/skein``), unless the user named one
# (``SKEIN_CONFIG``). Read by skein when it loads: set before.
os.environ.setdefault("SKEIN_CONFIG", str(tony_home() / "skein"))
# The first use writes the certificate there, and skein warns of it in a Python traceback-like
# line amid the submission's progress: the directory is tony's own, and nothing is asked of the user.
warnings.filterwarnings("ignore", message="Skein global security credentials not found", category=UserWarning)

_ENV_LOCK = threading.Lock()
_JAR_LOCK = threading.Lock()

#: How long a detached driver waits for the next command before it stops (``TONY_DRIVER_IDLE_S``).
DEFAULT_IDLE_S = 600.0
#: How long a command waits for the detached driver it started to answer.
_DETACHED_START_S = 120.0
_DETACH = False


def detach_drivers(yes: bool = True) -> None:
    """Whether the drivers this process starts are started detached, kept for the user's next
    commands (see the module's docstring): for short-lived front ends, the ``tony`` command."""
    global _DETACH
    _DETACH = yes


def idle_seconds() -> float:
    """How long a detached driver waits for a command (``TONY_DRIVER_IDLE_S``; 0: none is detached)."""
    try:
        return max(0.0, float(os.environ.get("TONY_DRIVER_IDLE_S", DEFAULT_IDLE_S)))
    except ValueError:
        return DEFAULT_IDLE_S


@contextlib.contextmanager
def _hadoop_conf_env(conf_dir: Path) -> Iterator[None]:
    """HADOOP_CONF_DIR set to ``conf_dir`` while skein starts its driver. The driver finds the
    cluster through ``yarn classpath``, run with this process's environment; setting the variable
    only meanwhile lets backends for different clusters (two connections in one Airflow triggerer)
    each reach their own."""
    with _ENV_LOCK:
        saved = os.environ.get("HADOOP_CONF_DIR")
        os.environ["HADOOP_CONF_DIR"] = str(conf_dir)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("HADOOP_CONF_DIR", None)
            else:
                os.environ["HADOOP_CONF_DIR"] = saved


_DRIVERS: dict[tuple[Any, ...], Any] = {}
_DRIVERS_LOCK = threading.Lock()


def _driver_key(conf: dict[str, str], principal: str | None, keytab: str | None) -> tuple[Any, ...]:
    """What tells drivers apart: the cluster, the login, and on a Kerberized cluster the KDC's
    configuration and (for a ticket login) the ticket cache the driver would read."""
    kerberos: tuple[Any, ...] = ()
    if is_secure(conf):
        kerberos = (os.environ.get("KRB5_CONFIG"), None if keytab else os.environ.get("KRB5CCNAME"))
    return (tuple(sorted(conf.items())), principal, keytab, *kerberos)


def _java_options(secure: bool) -> list[str]:
    """The driver JVM's options: ``SKEIN_DRIVER_JAVA_OPTIONS`` (which skein reads only when given
    none), where the KDC's configuration is unless those already say, and its logging. skein's
    jar logs Hadoop's INFO and WARN lines (NativeCodeLoader, the failover proxy, "Submitted
    application") to the console, into the progress a user reads: they say nothing a user acts
    on, so the root logger goes to skein's level (ERROR unless ``SKEIN_LOG_LEVEL`` says)."""
    options = os.environ.get("SKEIN_DRIVER_JAVA_OPTIONS", "").split()
    # A driver relays a few calls a second to the ResourceManager and HDFS: no optimizing compiler
    # (most of what a starting JVM spends, 5.7 CPU seconds against 2.7 without it) nor a parallel
    # collector, unless the options say otherwise.
    if not any(o.startswith(("-XX:TieredStopAtLevel", "-XX:-TieredCompilation")) for o in options):
        options.append("-XX:TieredStopAtLevel=1")
    if not any(o.startswith("-XX:+Use") and o.endswith("GC") for o in options):
        options.append("-XX:+UseSerialGC")
    if secure and not any(o.startswith("-Djava.security.krb5.conf=") for o in options):
        options += Login.java_options()
    if not any(o.startswith("-Dlog4j.configuration=") for o in options):
        with contextlib.suppress(OSError):
            options.append(f"-Dlog4j.configuration=file:{_log4j_properties()}")
    return options


def _log_level() -> str:
    return os.environ.get("SKEIN_LOG_LEVEL") or "ERROR"


#: The driver's logging: skein's own (its jar's), but for the root logger, which its jar sets to
#: INFO whatever skein's level: at skein's level instead (``-Dskein.log.level``, which skein sets).
LOG4J = """\
log4j.rootLogger=${skein.log.level}, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.Target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{yy/MM/dd HH:mm:ss} %p %c{2}: %m%n
log4j.logger.com.anaconda.skein.shaded.org.eclipse.jetty=WARN
log4j.logger.org.apache.zookeeper=WARN
"""


def _log4j_properties() -> Path:
    """The driver's log4j configuration (:data:`LOG4J`), written once into skein's directory."""
    path = Path(os.environ["SKEIN_CONFIG"]) / "tony-driver-log4j.properties"
    if not path.is_file() or path.read_text() != LOG4J:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(LOG4J)
        tmp.replace(path)
    return path


def _record(key: tuple[Any, ...]) -> Path:
    """Where the driver for ``key`` is recorded for this user's other processes."""
    import skein
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    return Path(skein.properties.config_dir) / "tony-drivers" / f"{name}.json"


def _write_record(key: tuple[Any, ...], client: Any) -> None:
    """Records ``client``'s driver (its address, and its JVM's pid and start time) for ``key``."""
    proc = getattr(client, "_proc", None)
    if proc is None:
        return
    path = _record(key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps({"address": client.address, "pid": proc.pid, "jar": driver_jar()[0],
                                    "started": process.start_time(proc.pid), "owner": os.getpid()}))
        part.replace(path)


@contextlib.contextmanager
def _started_from(jar: str) -> Iterator[None]:
    """skein starts the drivers of this block from ``jar`` (which each uploads for the master); skein's
    own use elsewhere in the process is left as it was. skein reads the module's jar as a driver starts."""
    import skein
    with _JAR_LOCK:
        saved, skein.core._SKEIN_JAR = skein.core._SKEIN_JAR, jar
        try:
            yield
        finally:
            skein.core._SKEIN_JAR = saved


def _forget_record(key: tuple[Any, ...], client: Any) -> None:
    """Removes the record of ``client``'s driver, if it is still the one recorded for ``key``."""
    path = _record(key)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("address") == client.address:
            path.unlink()


def _ticket_time() -> float | None:
    """When the ticket cache ``KRB5CCNAME`` names (a file) was last written: a ``kinit`` since."""
    cache = os.environ.get("KRB5CCNAME", "")
    path = cache[len("FILE:"):] if cache.startswith("FILE:") else (cache if cache.startswith("/") else "")
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def _neighbours_driver(key: tuple[Any, ...]) -> Any:
    """A client of the driver another process of this user runs for ``key``, or None when there is
    none, or the one recorded has ended, does not answer, or logged in before the ticket cache got a
    newer ticket (it is told to stop: its record is removed). Using it renews its lease."""
    import skein
    path = _record(key)
    try:
        found = json.loads(path.read_text())
        address, pid, started = found["address"], int(found["pid"]), found.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if found.get("jar") != driver_jar()[0]:
        return None  # started from another jar (TonY's changes to skein, or not): this process starts its own
    ticket = _ticket_time() if len(key) > 3 and key[-1] else None
    if not process.alive(pid, started) or (ticket is not None and started is not None and ticket > started):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    try:
        client = skein.Client(address=address, security=skein.Security.from_default())
    except Exception:  # noqa: BLE001 - any failure to reach it means starting one of our own
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # its lease: a detached driver stops once none is renewed for its idle time
    return client


def _start_detached(key: tuple[Any, ...], conf: dict[str, str], conf_dir: Path, principal: str | None,
                    keytab: str | None) -> Any:
    """Starts this user's driver for ``key`` in a process of its own (``python -m`` this module)
    and returns a client of it, once it answers. Its output goes to a log beside its record."""
    record = _record(key)
    record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    params = {"conf": conf, "conf_dir": str(conf_dir), "principal": principal, "keytab": keytab,
              "idle": idle_seconds()}
    with open(record.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tony_workflow.backends.yarn.driver"], stdin=subprocess.PIPE,
                                stdout=log, stderr=log, start_new_session=True, close_fds=True,
                                env={**os.environ, "HADOOP_CONF_DIR": str(conf_dir)})
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(params).encode())
    proc.stdin.close()
    deadline = time.monotonic() + _DETACHED_START_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(record.read_text()).get("owner") == proc.pid:
                client = _neighbours_driver(key)
                if client is not None:
                    return client
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        proc.kill()
    tail = record.with_suffix(".log").read_text(errors="replace")[-2000:] if record.with_suffix(".log").exists() else ""
    raise ConfigError(f"skein's Java driver did not start in a process of its own: {tail.strip() or 'no output'}")


def _serve(params: dict[str, Any]) -> None:
    """A detached driver (see the module's docstring): starts the JVM, records it, and stops it
    once its lease has not been renewed for its idle time, its record is gone or changed, or its
    JVM has died."""
    conf, principal, keytab, idle = params["conf"], params.get("principal"), params.get("keytab"), params["idle"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stops the JVM on the way out (atexit)
    client = shared_driver(conf, Path(params["conf_dir"]), principal, keytab)
    record = _record(_driver_key(conf, principal, keytab))
    proc = getattr(client, "_proc", None)
    while True:
        time.sleep(max(0.2, min(5.0, idle / 4)))
        try:
            held = json.loads(record.read_text()).get("address") == client.address
            idle_for = time.time() - record.stat().st_mtime
        except (OSError, ValueError):
            break
        if not held or idle_for > idle or (proc is not None and proc.poll() is not None):
            break
    close_drivers()


def _answers(client: Any) -> bool:
    """Whether a driver this process did not start still answers (its owner may have exited)."""
    from skein import proto
    try:
        client._call("ping", proto.Empty())
    except Exception:  # noqa: BLE001 - a driver gone away fails in gRPC's or skein's words
        return False
    return True


def check_driver_can_start(environ: dict[str, str] | None = None) -> None:
    """ConfigError saying what is missing when skein's driver could not start: Java (``JAVA_HOME``,
    else ``java`` on PATH) and Hadoop's ``yarn`` command, which gives the driver its classpath."""
    env = os.environ if environ is None else environ
    java = os.path.join(env["JAVA_HOME"], "bin", "java") if env.get("JAVA_HOME") else shutil.which("java",
                                                                                               path=env.get("PATH"))
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={env['JAVA_HOME']} has no bin/java" if env.get("JAVA_HOME") else "no java on PATH"
        raise ConfigError(f"the YARN backend needs Java 8 or later for skein's driver: {where}; "
                          "set JAVA_HOME to a Java installation")
    if not shutil.which("yarn", path=env.get("PATH")):
        raise ConfigError("the YARN backend needs Hadoop's `yarn` command on PATH (it gives skein's driver its "
                          "classpath): add $HADOOP_HOME/bin to PATH")


def shared_driver(conf: dict[str, str], conf_dir: Path, principal: str | None = None,
                  keytab: str | None = None) -> Any:
    """The process's skein client (one Java driver) for the cluster ``conf`` describes and this
    login (``principal`` and ``keytab``, or the ticket cache). Backends of one cluster share it,
    whatever directory their configuration was written to, and so do this user's other processes
    (the module's note). A driver that has died is replaced."""
    import skein
    key = _driver_key(conf, principal, keytab)
    with _DRIVERS_LOCK:
        client = _DRIVERS.get(key)
        proc = getattr(client, "_proc", None)
        if client is not None and proc is None:
            if _answers(client):
                with contextlib.suppress(OSError):
                    os.utime(_record(key))  # a neighbour's driver, detached or not: its lease renewed
            else:
                client = None
        if client is None or (proc is not None and proc.poll() is not None):
            client = _neighbours_driver(key)
            if client is not None:
                _DRIVERS[key] = client
                return client
            check_driver_can_start()
            if _DETACH and idle_seconds() > 0:
                client = _DRIVERS[key] = _start_detached(key, conf, conf_dir, principal, keytab)
                return client
            kwargs: dict[str, Any] = {"principal": principal, "keytab": keytab} if keytab else {}
            kwargs["java_options"] = _java_options(is_secure(conf))
            # Java's and skein's INFO and WARN lines (NativeCodeLoader, "Submitting application")
            # say nothing a user acts on; SKEIN_LOG_LEVEL shows them again.
            kwargs["log_level"] = _log_level()
            try:
                with _hadoop_conf_env(conf_dir), _started_from(driver_jar()[0]):
                    client = _DRIVERS[key] = skein.Client(**kwargs)
            except skein.exceptions.DriverError as e:
                raise ConfigError(f"skein's Java driver did not start ({e}): see the lines above; JAVA_HOME is "
                                  f"{os.environ.get('JAVA_HOME') or 'not set'}, HADOOP_CONF_DIR is {conf_dir}") from None
            _write_record(key, client)
        return client


def driver_running(conf: dict[str, str], principal: str | None = None, keytab: str | None = None) -> bool:
    """Whether this process already runs the driver :func:`shared_driver` would give."""
    return _driver_key(conf, principal, keytab) in _DRIVERS


def close_drivers(resource_manager: str | None = None) -> None:
    """Stops the process's skein drivers (at exit, or when a caller is done with a cluster): their
    gRPC channels must not outlive the interpreter's teardown. With ``resource_manager`` (a
    ``host:port``, as ``yarn.resourcemanager.address`` gives it), only the drivers of that cluster."""
    with _DRIVERS_LOCK:
        keys = [key for key in _DRIVERS if resource_manager is None
                or dict(key[0]).get("yarn.resourcemanager.address") == resource_manager]
        clients = [(key, _DRIVERS.pop(key)) for key in keys]
    for key, client in clients:
        if getattr(client, "_proc", None) is not None:
            _forget_record(key, client)
        with contextlib.suppress(Exception):
            client.close()  # a neighbour's driver goes on: only its channel closes


atexit.register(close_drivers)


if __name__ == "__main__":
    _serve(json.loads(sys.stdin.read()))


#: how long a submission whose files HDFS placed on no DataNode waits before its one more try
_DATANODE_RETRY_S = 5


def driver_cause(message: str) -> str:
    """The line of a skein driver's error that says what went wrong: not its "Failed to submit
    application, exception:" opening, nor the Java stack under it."""
    lines = [line.strip() for line in message.splitlines()]
    said = [line for line in lines if line and not line.startswith("at ") and not line.endswith("exception:")]
    return (said[0] if said else lines[0] if lines else "no reason given")[:400]


def no_datanode_took(message: str) -> bool:
    """Whether a driver's error is HDFS placing a block of the application's files on no DataNode
    (``could only be written to 0 of the 1 minReplication nodes``)."""
    return "could only be written to 0 of the" in message


def submit_application(driver: Callable[[], Any], app: Any,
                       impersonation: Callable[[str], Exception] | None = None) -> str:
    """Gives ``app`` to skein's driver (``driver()``), which writes the application's files to
    HDFS and then submits it; returns its id. A block HDFS could not place is tried once more (a
    DataNode busy for a moment); what the driver still refuses becomes one line naming the cause
    (``impersonation(cause)``: the error for a proxy user the ResourceManager refuses)."""
    import skein
    for attempt in (1, 2):
        try:
            return str(driver().submit(app))
        except skein.exceptions.DriverError as e:
            cause = driver_cause(str(e))
            if impersonation is not None and "impersonate" in str(e):
                raise impersonation(cause) from None
            if not no_datanode_took(str(e)):
                raise ClusterError(f"YARN did not take the job: {cause}; nothing was submitted") from None
            if attempt == 2:
                raise ClusterError(
                    f"HDFS took none of the job's files ({cause}); nothing was submitted. Its DataNodes refused "
                    "the block: a full disk under dfs.datanode.data.dir, or a DataNode that does not answer "
                    "(`hdfs dfsadmin -report` shows each one's space and state)") from None
            logging.getLogger("tony.ship").warning("HDFS placed none of the job's files (%s): trying once more in "
                                                   "%d s", cause, _DATANODE_RETRY_S)
            time.sleep(_DATANODE_RETRY_S)
    raise AssertionError("the loop returns or raises")
