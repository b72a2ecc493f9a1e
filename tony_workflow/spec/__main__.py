"""``python -m tony_workflow.spec``: prints the key reference made from the table (:mod:`.table`);
with ``--readme PATH``, rewrites that file's generated section instead."""
from __future__ import annotations

import sys

from .table import reference_markdown, write_readme

if sys.argv[1:2] == ["--readme"] and len(sys.argv) == 3:
    write_readme(sys.argv[2])
else:
    print(reference_markdown())
