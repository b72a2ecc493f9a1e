"""Every error tony-workflow raises on purpose, in one tree under :class:`TonyError`.

A caller catches the project's errors without catching Python's, and each front end (the ``tony``
command, the Airflow operator, the Azkaban job type) turns the kinds below into its own
conventions in one place (an exit status and a line, a task that fails without retries or with
them, a job log line). The user-facing kinds:

- :class:`SpecError`: the job's description cannot be used (every problem at once, each naming
  the key); nothing was submitted. Also a :class:`ValueError`.
- :class:`SubmissionRefused`: the cluster can never run the job as described (a container larger
  than any node, a label nobody carries, more than the queue may ever hold); nothing was submitted.
- :class:`UnknownApplication`: no cluster and no history knows the application id. Also a
  :class:`LookupError`; :class:`NotAnApplicationId`, text that is no id at all, is a
  :class:`ValueError` too.
- :class:`AMUnreachable`: the job's ApplicationMaster did not answer (not started yet, or gone).
  Also a :class:`ConnectionError`. :class:`AMError`: it answered, with an error.
- :class:`StoreError`: the checkpoint or history store failed. Also an :class:`OSError`.
- :class:`LoginError`: the login a secure cluster needs is missing or refused. Also a
  :class:`ValueError`.
- :class:`ClusterError`: the cluster itself (the ResourceManager, a mini cluster) failed or
  refused.
- :class:`ConfigError`: the configuration of the backend or the cluster (not the job's) is
  missing or wrong: an unknown backend, no ResourceManager address, a storage location that
  names no file system. Also a :class:`ValueError`.
- :class:`UsageError`: a command's own arguments are wrong. Also a :class:`ValueError`.
- :class:`DataError`: a job's input cannot be read as declared (no such path, an unknown format,
  a damaged file, schemas that differ, a column that is not there), naming the input and the
  file. Also a :class:`ValueError`.

The Python base classes are kept beside the root so that code written against the older,
scattered exceptions (``except ValueError`` around a spec, ``except OSError`` around a store)
keeps working. This module imports nothing of the package.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "AMError",
    "AMUnreachable",
    "AccessDenied",
    "ClusterError",
    "ConfigError",
    "DataError",
    "LoginError",
    "NotAnApplicationId",
    "SpecError",
    "StoreError",
    "SubmissionRefused",
    "TonyError",
    "UnknownApplication",
    "UsageError",
]


class TonyError(Exception):
    """The root of every error tony-workflow raises on purpose."""


class SpecError(TonyError, ValueError):
    """A spec that cannot be used. ``issues`` lists every problem found (each a
    :class:`~tony_workflow.spec.errors.SpecIssue`); ``str()`` gives one per line."""

    def __init__(self, issues: Iterable[Any], spec: Any = None):
        # A problem found by two checks is said once.
        self.issues = list({str(issue): issue for issue in issues}.values())
        #: the spec as far as it could be read despite these problems (a JobSpec, or None): what
        #: the checks after loading can still look at, so that every problem is said at once
        self.spec = spec
        super().__init__(self.issues)

    def __str__(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)


class SubmissionRefused(TonyError):
    """The cluster can never run the job as described; nothing was submitted. ``key`` names the
    spec key to change, when one does."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


class UnknownApplication(TonyError, LookupError):
    """No cluster (and no history, where one was asked) knows ``app_id``."""

    def __init__(self, app_id: str, where: str | None = None):
        super().__init__(app_id)
        self.app_id, self.where = app_id, where

    def __str__(self) -> str:
        return f"unknown application {self.app_id}" + (f" ({self.where})" if self.where else "")


class NotAnApplicationId(UnknownApplication, ValueError):
    """Text given as an application id that does not have an id's shape: no application has it."""

    def __str__(self) -> str:
        return f"not an application id: {self.where}"


class AMUnreachable(TonyError, ConnectionError):
    """The job's ApplicationMaster could not be reached (not started yet, or gone)."""


class AMError(TonyError):
    """The ApplicationMaster answered with an error ``status`` (an HTTP status code)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"AM answered {status}: {message}")
        self.status = status


class StoreError(TonyError, OSError):
    """The checkpoint or history store (a local directory, HDFS) could not be read or written."""


class LoginError(TonyError, ValueError):
    """The login a secure cluster needs is missing, or was refused."""


class ClusterError(TonyError, RuntimeError):
    """The cluster (its ResourceManager, a mini cluster being started) failed or refused a request."""


class AccessDenied(TonyError, PermissionError):
    """The cluster refuses this user a job: its access control lists
    (tony.application.view-acls, tony.application.modify-acls) do not name them."""


class OutputRefused(TonyError):
    """The node holding a task's output answered a request for it with an error (not "not yet"):
    the follower says so, once, and asks again later."""


class ConfigError(TonyError, ValueError):
    """The configuration of the backend or the cluster (not the job's own keys) is missing or wrong."""


class UsageError(TonyError, ValueError):
    """A command's own arguments are wrong (not a job's spec)."""


class DataError(TonyError, ValueError):
    """An input of the job cannot be read as declared: ``input`` is its name, ``path`` the file
    (or path) at fault, when one is."""

    def __init__(self, message: str, input: str | None = None, path: str | None = None):
        super().__init__(message)
        self.input, self.path, self.message = input, path, message

    def __str__(self) -> str:
        where = [f"input {self.input!r}"] if self.input else []
        if self.path:
            where.append(self.path)
        return ": ".join([*where, self.message])
