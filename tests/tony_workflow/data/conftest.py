"""Fixtures of the data reader's tests: the shared fixture files, and datasets written here."""
from __future__ import annotations

import pytest

from tests.conftest import shared_dir


@pytest.fixture
def fixture_data():
    """``../shared/fixtures/data``: files other projects' writers made (a user's clone has none)."""
    d = shared_dir() / "fixtures" / "data"
    if not d.is_dir():
        pytest.skip(f"{d} is not here: the fixture files come with the project's shared directory")
    return d


@pytest.fixture(autouse=True)
def data_home(tmp_path, monkeypatch):
    """A TONY_HOME of the test's own: the files' index (and manifests) go there, not to ~/.tony."""
    home = tmp_path / "tony-home"
    monkeypatch.setenv("TONY_HOME", str(home))
    return home
