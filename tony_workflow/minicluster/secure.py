"""Kerberos for the mini cluster (``tony minicluster start --secure``): the principals and keytabs,
the daemons' and clients' security settings, and logging a client in with MIT ``kinit``.

A secure cluster runs a KDC (Hadoop's MiniKdc) in its JVM, which writes ``kerberos/krb5.conf`` and
the keytabs named here into the cluster's directory before any daemon starts. What is secured, and
how, is what a Kerberized production cluster does, short of what needs root:

* RPC: every daemon and client authenticates with Kerberos (``hadoop.security.authentication``).
* The web servers (the ResourceManager's REST API, WebHDFS, the UIs) ask for SPNEGO as
  ``HTTP/localhost``; the ResourceManager also takes its own delegation tokens there.
* HDFS data transfer: block access tokens, with a SASL handshake on the DataNode's port. A secure
  DataNode otherwise insists on privileged ports (root) or on HTTPS;
  ``ignore.secure.ports.for.testing`` lets it start on ordinary ports with plain HTTP, and the
  SASL handshake is what then authenticates its clients.
* Containers run as the NodeManager's own user (DefaultContainerExecutor): running them as the
  submitting user needs the setuid LinuxContainerExecutor, hence root.
* Containers' logs are served by the NodeManagers over SPNEGO and aggregated into HDFS, as on a
  production cluster. A secure NodeManager checks each file's owner before opening it, with
  Hadoop's native library, which the jars from Maven do not include: the launcher compiles a
  stand-in for the class that does it (``org.apache.hadoop.io.SecureIOUtils``, the same check made
  with Java's POSIX file attributes), first on the daemons' classpath.

Three more users have principals and keytabs (:data:`OTHER_USERS`), for what a shared cluster is
about: a teammate who may stop a job (``colleague``), one who may only watch it (``viewer``) and a
stranger (``outsider``). The submitting user may act as either teammate (a job's proxy user). YARN's access control
lists are on (``yarn.acl.enable``), with the service and the submitting user as administrators.

All daemons share one service principal, ``hadoop/localhost``: a JVM has a single Kerberos login,
which every daemon in it serves as, and a client checks a server's principal against the setting
for that server, so the settings can only name that one. The submitting user gets a principal of
its own, named after the OS user, with a keytab next to the service's.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .build import MiniClusterError, tail

__all__ = ["OTHER_USERS", "REALM", "SERVICE_PRINCIPAL", "SPNEGO_PRINCIPAL", "Kerberos", "find_kinit", "kinit"]

REALM = "EXAMPLE.COM"
# Hosts are written "localhost", never resolved: the daemons listen on the loopback only, and the
# krb5.conf the KDC writes tells Java and MIT alike to leave names as they are.
_SERVICE = "hadoop/localhost"
_SPNEGO = "HTTP/localhost"
SERVICE_PRINCIPAL = f"{_SERVICE}@{REALM}"
SPNEGO_PRINCIPAL = f"{_SPNEGO}@{REALM}"
#: Users besides the submitting one, each with a principal and a keytab (:meth:`Kerberos.user_keytab`).
OTHER_USERS = ("colleague", "viewer", "outsider")


@dataclass(frozen=True)
class Kerberos:
    """Where a secure cluster in ``directory`` keeps its Kerberos files, and the settings that
    name them. ``user`` is the submitting user's OS name, which is also its principal's."""

    directory: Path
    user: str

    @property
    def dir(self) -> Path:
        return self.directory / "kerberos"

    @property
    def krb5_conf(self) -> Path:
        return self.dir / "krb5.conf"

    @property
    def service_keytab(self) -> Path:
        return self.dir / "hadoop.keytab"

    @property
    def keytab(self) -> Path:
        return self.dir / f"{self.user}.keytab"

    @property
    def principal(self) -> str:
        return f"{self.user}@{REALM}"

    def user_keytab(self, name: str) -> Path:
        """The keytab of ``name``, one of :data:`OTHER_USERS` (principal ``name@REALM``)."""
        return self.dir / f"{name}.keytab"

    @property
    def ccache(self) -> Path:
        """The ticket cache clients of this cluster use, so that a login here leaves the user's
        own tickets (``/tmp/krb5cc_UID``) alone."""
        return self.dir / "ccache"

    @property
    def _http_secret(self) -> Path:
        return self.dir / "http-signature-secret"

    def prepare(self) -> None:
        """Makes the private directory the KDC writes into, and the secret that signs the web
        servers' authentication cookies (without one, each server would pick its own at random)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        fd = os.open(self._http_secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))

    def launcher_args(self) -> list[str]:
        """The launcher's arguments that start the KDC: the realm, then each keytab with its
        principals."""
        return [REALM, f"{self.service_keytab}={_SERVICE},{_SPNEGO}", f"{self.keytab}={self.user}",
                *(f"{self.user_keytab(n)}={n}" for n in OTHER_USERS if n != self.user)]

    def java_options(self) -> tuple[str, ...]:
        """What a client JVM needs to find the KDC: Java does not read ``KRB5_CONFIG``."""
        return (f"-Djava.security.krb5.conf={self.krb5_conf}",)

    def server_settings(self) -> dict[str, dict[str, object]]:
        """The daemons' security settings, by site file, on top of the insecure cluster's."""
        keytab = str(self.service_keytab)
        core = {
            "hadoop.security.authentication": "kerberos",
            # SPNEGO on every web server; the ResourceManager swaps in its own filter, which also
            # takes its delegation tokens, and the NameNode its own for WebHDFS.
            "hadoop.http.filter.initializers": "org.apache.hadoop.security.AuthenticationFilterInitializer",
            "hadoop.http.authentication.type": "kerberos",
            "hadoop.http.authentication.simple.anonymous.allowed": False,
            "hadoop.http.authentication.kerberos.principal": SPNEGO_PRINCIPAL,
            "hadoop.http.authentication.kerberos.keytab": keytab,
            "hadoop.http.authentication.signature.secret.file": str(self._http_secret),
            # The submitting user may run jobs as its teammates (a job's proxy user), from anywhere;
            # the stranger may not.
            f"hadoop.proxyuser.{self.user}.hosts": "*",
            f"hadoop.proxyuser.{self.user}.users": "colleague,viewer",
        }
        hdfs = {
            "dfs.namenode.kerberos.principal": SERVICE_PRINCIPAL,
            "dfs.namenode.keytab.file": keytab,
            "dfs.datanode.kerberos.principal": SERVICE_PRINCIPAL,
            "dfs.datanode.keytab.file": keytab,
            "dfs.web.authentication.kerberos.principal": SPNEGO_PRINCIPAL,
            "dfs.web.authentication.kerberos.keytab": keytab,
            # A secure DataNode refuses to start without block access tokens.
            "dfs.block.access.token.enable": True,
            "dfs.data.transfer.protection": "authentication",
            # Ordinary ports and plain HTTP for the DataNode, which would otherwise want root or
            # HTTPS; the SASL handshake above stands in for the privileged port.
            "ignore.secure.ports.for.testing": True,
        }
        yarn = {
            "yarn.resourcemanager.principal": SERVICE_PRINCIPAL,
            "yarn.resourcemanager.keytab": keytab,
            "yarn.nodemanager.principal": SERVICE_PRINCIPAL,
            "yarn.nodemanager.keytab": keytab,
            "yarn.resourcemanager.webapp.spnego-principal": SPNEGO_PRINCIPAL,
            "yarn.resourcemanager.webapp.spnego-keytab-file": keytab,
            "yarn.nodemanager.webapp.spnego-principal": SPNEGO_PRINCIPAL,
            "yarn.nodemanager.webapp.spnego-keytab-file": keytab,
            # Applications' access control lists are enforced; the service and the submitting user
            # administer the cluster, the other users do not.
            "yarn.acl.enable": True,
            "yarn.admin.acl": f"hadoop,{self.user}",
            # Containers run as the NodeManager's user, not the submitter's: the executor that
            # switches users is a setuid binary that only root can install.
            "yarn.nodemanager.container-executor.class":
                "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor",
            # Tools in containers that speak Kerberos (kinit, a JVM's GSS) find this KDC.
            "yarn.nodemanager.admin-env": f"MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX,KRB5_CONFIG={self.krb5_conf}",
        }
        # Who administers a queue may see and stop every application of it: the administrators
        # only, or the applications' own ACLs would stand for nothing.
        admins = f"hadoop,{self.user}"
        queues = {"yarn.scheduler.capacity.root.acl_administer_queue": admins,
                  "yarn.scheduler.capacity.root.default.acl_administer_queue": admins}
        return {"core-site.xml": core, "hdfs-site.xml": hdfs, "yarn-site.xml": yarn, "capacity-scheduler.xml": queues}

    def client_settings(self) -> dict[str, dict[str, object]]:
        """What clients need on top of the addresses: to use Kerberos, the principals to expect of
        the servers, and the DataNode's SASL handshake."""
        core = {"hadoop.security.authentication": "kerberos"}
        hdfs = {
            "dfs.namenode.kerberos.principal": SERVICE_PRINCIPAL,
            "dfs.datanode.kerberos.principal": SERVICE_PRINCIPAL,
            "dfs.web.authentication.kerberos.principal": SPNEGO_PRINCIPAL,
            "dfs.data.transfer.protection": "authentication",
        }
        yarn = {
            "yarn.resourcemanager.principal": SERVICE_PRINCIPAL,
            "yarn.nodemanager.principal": SERVICE_PRINCIPAL,
        }
        return {"core-site.xml": core, "hdfs-site.xml": hdfs, "yarn-site.xml": yarn}

    def env(self) -> dict[str, str]:
        """The variables that point MIT Kerberos (and Hadoop's login, which reads ``KRB5CCNAME``)
        at this cluster's KDC and ticket cache."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5CCNAME": str(self.ccache)}


def find_kinit() -> str:
    """The ``kinit`` on PATH, which a secure cluster's clients log in with."""
    exe = shutil.which("kinit")
    if not exe:
        raise MiniClusterError("kinit is needed to log in to a secure mini cluster; install MIT Kerberos's "
                               "client tools (Debian: apt-get install krb5-user)")
    return exe


def kinit(krb5_conf: str | os.PathLike[str], ccache: str | os.PathLike[str], principal: str,
          keytab: str | os.PathLike[str]) -> None:
    """Logs ``principal`` in from ``keytab`` into the ticket cache ``ccache`` with ``kinit``, using
    the KDC that ``krb5_conf`` names. ``-k -t`` is understood by MIT's kinit and Heimdal's."""
    exe = find_kinit()
    env = {**os.environ, "KRB5_CONFIG": str(krb5_conf), "KRB5CCNAME": str(ccache)}
    try:
        done = subprocess.run([exe, "-k", "-t", str(keytab), principal], env=env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise MiniClusterError(f"kinit did not log {principal} in within 60 s; does the KDC in {krb5_conf} "
                               "still run?") from None
    if done.returncode != 0:
        raise MiniClusterError(f"kinit could not log {principal} in from {keytab} (exit {done.returncode}):\n"
                               f"{tail(done.stdout + done.stderr)}")
