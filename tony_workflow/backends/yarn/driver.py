"""skein's Java driver: one per process for each cluster and login.

Only submitting a job needs the driver (following one needs no JVM: see
:mod:`tony_workflow.backends.yarn.rm`). A driver is a JVM of a few hundred MB, and an Airflow triggerer
may hold many backends of one cluster, so they share it (:func:`shared_driver`). Processes of
one user share it too: a process that starts a driver records where it listens in skein's
configuration directory (``$SKEIN_CONFIG``, else ``~/.skein``, which holds the certificate the
driver is reached with), and a later process for the same cluster and login connects to it
rather than starting a JVM of its own (a ``tony submit`` beside an Airflow worker, say). When
the owner exits its driver goes with it, and the next process starts one again.

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
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ... import process
from ...errors import ConfigError
from ...kerberos import Login, is_secure

__all__ = ["check_driver_can_start", "close_drivers", "driver_running", "shared_driver"]

# skein talks to its driver and to its ApplicationMaster over gRPC, which by default restarts its
# polling threads in every child this process forks. A child that then closes its descriptors
# before exec (subprocess with preexec_fn; an Airflow worker forking a task) kills that thread's
# epoll descriptor under it, and gRPC aborts the child. No channel is ever used across a fork here,
# so the children are spared that machinery. Read by gRPC when it starts: set before skein loads it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

_ENV_LOCK = threading.Lock()


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


def _java_options() -> list[str]:
    """The driver JVM's options: ``SKEIN_DRIVER_JAVA_OPTIONS`` (which skein reads only when given
    none), and where the KDC's configuration is unless those already say."""
    options = os.environ.get("SKEIN_DRIVER_JAVA_OPTIONS", "").split()
    if not any(o.startswith("-Djava.security.krb5.conf=") for o in options):
        options += Login.java_options()
    return options


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
        part.write_text(json.dumps({"address": client.address, "pid": proc.pid,
                                    "started": process.start_time(proc.pid), "owner": os.getpid()}))
        part.replace(path)


def _forget_record(key: tuple[Any, ...], client: Any) -> None:
    """Removes the record of ``client``'s driver, if it is still the one recorded for ``key``."""
    path = _record(key)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("address") == client.address:
            path.unlink()


def _neighbours_driver(key: tuple[Any, ...]) -> Any:
    """A client of the driver another process of this user runs for ``key``, or None when there is
    none, or the one recorded has ended or does not answer."""
    import skein
    path = _record(key)
    try:
        found = json.loads(path.read_text())
        address, pid, started = found["address"], int(found["pid"]), found.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not process.alive(pid, started):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    try:
        return skein.Client(address=address, security=skein.Security.from_default())
    except Exception:  # noqa: BLE001 - any failure to reach it means starting one of our own
        return None


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
        if client is not None and proc is None and not _answers(client):
            client = None
        if client is None or (proc is not None and proc.poll() is not None):
            client = _neighbours_driver(key)
            if client is not None:
                _DRIVERS[key] = client
                return client
            check_driver_can_start()
            kwargs: dict[str, Any] = {"principal": principal, "keytab": keytab} if keytab else {}
            if is_secure(conf):
                kwargs["java_options"] = _java_options()
            # Java's and skein's INFO and WARN lines (NativeCodeLoader, "Submitting application")
            # say nothing a user acts on; SKEIN_LOG_LEVEL shows them again.
            kwargs["log_level"] = os.environ.get("SKEIN_LOG_LEVEL") or "ERROR"
            try:
                with _hadoop_conf_env(conf_dir):
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
