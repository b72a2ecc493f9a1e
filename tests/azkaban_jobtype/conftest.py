"""Shared helpers for the Azkaban job type tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_dir

FIXTURES = shared_dir() / "fixtures" / "azkaban"
EXAMPLE = REPO / "examples" / "azkaban" / "mnist"


def pytest_configure(config):
    config.addinivalue_line("markers", "azkaban: drives Azkaban's own classes (needs Java 17 and Maven)")


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120):
    """Runs the real ``tony-azkaban`` command line in a subprocess."""
    return subprocess.run([sys.executable, "-m", "azkaban_jobtype.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, env={**os.environ, **(env or {})}, check=False)


def partition_command_line(command: str) -> list[str]:
    """How Azkaban's ProcessJob splits a ``command`` into argv: at spaces outside quotes, dropping
    the quotes (double quotes inside single ones and the reverse are kept), without a shell."""
    args, current, in_single, in_double = [], [], False, False
    for c in command:
        if c == " " and not in_single and not in_double:
            if current:
                args.append("".join(current))
            current = []
        elif c == "'" and not in_double:
            in_single = not in_single
        elif c == '"' and not in_single:
            in_double = not in_double
        else:
            current.append(c)
    if current:
        args.append("".join(current))
    return args


@pytest.fixture
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"the shared Azkaban fixtures are not at {FIXTURES}")
    return FIXTURES


def zip_project(src: Path, archive: Path) -> Path:
    """Zips a project the way `zip -r` does: links are followed, so the archive holds the files."""
    import zipfile
    with zipfile.ZipFile(archive, "w") as zf:
        for root, _dirs, files in os.walk(src, followlinks=True):
            for name in files:
                path = Path(root) / name
                if "__pycache__" not in path.parts:
                    zf.write(path, path.relative_to(src).as_posix())
    return archive
