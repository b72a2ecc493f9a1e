"""The Kerberos login of a YARN job: the one its spec names (``tony.keytab.user`` and
``tony.keytab.location``), or the machine's (``tony-site.xml``)."""
from __future__ import annotations

import os
from collections.abc import Callable

from ...kerberos import KEYTAB_LOCATION, KEYTAB_USER, Login
from ...spec import JobSpec, SpecError, SpecIssue
from ...spec.keys import TONY_XML_DEFAULTS

__all__ = ["job_login", "site_keytab"]


def job_login(spec: JobSpec) -> Login | None:
    """The Kerberos login a job names with tony.keytab.user and tony.keytab.location; None when it
    leaves both at tony-default.xml's placeholders. The keytab is read here, by the client that
    submits: it is not shipped to the containers, which get delegation tokens instead."""
    given = _keytab_settings(spec.get)
    if not given:
        return None
    issues = [SpecIssue(spec.display(k), None, f"must be set too: {KEYTAB_USER} names the principal a job is "
                        f"submitted as, {KEYTAB_LOCATION} its keytab file", spec.source)
              for k in (KEYTAB_USER, KEYTAB_LOCATION) if k not in given]
    location = given.get(KEYTAB_LOCATION)
    if location and not (os.path.isfile(os.path.expanduser(location))
                         and os.access(os.path.expanduser(location), os.R_OK)):
        issues.append(SpecIssue(spec.display(KEYTAB_LOCATION), location, "must be a readable keytab file on the "
                                f"machine that submits (of the principal {KEYTAB_USER} names)", spec.source))
    if issues:
        raise SpecError(issues)
    return Login(given[KEYTAB_USER], location)


def site_keytab() -> tuple[str | None, str | None]:
    """tony.keytab.user and tony.keytab.location as ``$TONY_CONF_DIR/tony-site.xml`` sets them
    (None for each it leaves unset or at tony-default.xml's placeholder): the login of a machine
    whose every job is submitted as one principal, for following, killing and reading its history
    too."""
    from ...spec.loading import site_conf

    given = _keytab_settings(site_conf().get)
    return given.get(KEYTAB_USER), given.get(KEYTAB_LOCATION)


def _keytab_settings(get: Callable[[str], str | None]) -> dict[str, str]:
    """tony.keytab.user and tony.keytab.location as ``get`` reads them, leaving out those unset or
    at tony-default.xml's placeholders."""
    return {k: v for k in (KEYTAB_USER, KEYTAB_LOCATION)
            if (v := (get(k) or "").strip()) and v != TONY_XML_DEFAULTS[k]}
