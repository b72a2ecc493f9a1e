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
