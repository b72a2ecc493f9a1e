"""Value parsers (:mod:`tony_workflow.spec.values`)."""
from __future__ import annotations

import pytest

from tony_workflow.spec import (
    parse_memory,
)


@pytest.mark.parametrize("value, megabytes", [
    ("2g", 2048), ("2G", 2048), ("512m", 512), ("512M", 512), ("4096", 4096), (4096, 4096),
    ("1.5g", 1536), ("2gb", 2048), ("2GB", 2048), ("256mb", 256), (" 3g ", 3072), ("0.5m", 1),
])
def test_parse_memory(value, megabytes):
    assert parse_memory(value) == megabytes


@pytest.mark.parametrize("value", ["0", 0, "0g", "-1g", "-512", "abc", "2x", "2t", "2kb", "", "g", "1.2.3g",
                                   True, None, "nan", "inf"])
def test_parse_memory_refuses(value):
    with pytest.raises(ValueError, match="positive size"):
        parse_memory(value)
