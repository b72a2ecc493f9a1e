"""What the spec package's tests share: TonY's own files from the shared fixtures, and this
project's corpora of good and bad specs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tony_workflow.spec import JobSpec, SpecError, load_spec

HERE = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TONY_SHARED_DIR") or Path(__file__).resolve().parents[4] / "shared")
TONY_FIXTURES = SHARED / "fixtures" / "tony"
BAD_SPECS = sorted((HERE / "bad_specs").iterdir())
GOOD_SPECS = HERE / "good_specs"


def tony_fixture(name: str) -> Path:
    """One of TonY's own files from the shared fixtures; the test skips, saying why, without them."""
    path = TONY_FIXTURES / name
    if not path.is_file():
        pytest.skip(f"TonY's fixture {name} is not at {TONY_FIXTURES} (the shared fixtures sit beside a "
                    "development checkout, not in a clone)")
    return path


def errors_of(spec_or_path, **kwargs) -> SpecError:
    """The SpecError that loading and validating raises."""
    with pytest.raises(SpecError) as info:
        spec = spec_or_path if isinstance(spec_or_path, JobSpec) else load_spec(spec_or_path, **kwargs)
        spec.validate()
    return info.value
