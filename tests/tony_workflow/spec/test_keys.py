"""TonY's keys and defaults (:mod:`tony_workflow.spec.keys`), held to TonY's own tony-default.xml."""
from __future__ import annotations

from tests.tony_workflow.spec.common import tony_fixture
from tony_workflow.spec import (
    PROJECT_DEFAULTS,
    TONY_DEFAULTS,
    JobSpec,
    load_tony_xml,
)


def test_defaults_match_tony_default_xml():
    from_file = load_tony_xml(tony_fixture("tony-default.xml"))
    assert len(from_file) > 50
    assert {k: TONY_DEFAULTS.get(k) for k in from_file} == from_file
    # Everything else in TONY_DEFAULTS is this project's own, and documented as such.
    assert set(TONY_DEFAULTS) - set(from_file) == set(PROJECT_DEFAULTS)


def test_project_defaults():
    spec = JobSpec(conf={})
    assert spec.get("tony.local.vcore-oversubscription") is None  # the local cluster's, not a job's
    assert spec.get("tony.task.tensorboard.enabled") == "true"
    assert spec.get("tony.checkpoint.location") == ""
    assert spec.get("no.such.key", "fallback") == "fallback"
