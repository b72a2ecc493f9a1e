"""A Jupyter notebook as what a job executes (``executes: train.ipynb``): how a spec names one, the
module its tasks run it with (:mod:`tony_workflow.task.notebook`), and what makes a file no notebook
(checked before anything is submitted)."""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["JUPYTER_MODULES", "NOTEBOOK_MODULE", "absent_jupyter", "is_notebook", "notebook_problem"]

#: the module a notebook's tasks run it with, in the task's interpreter
NOTEBOOK_MODULE = "tony_workflow.task.notebook"
#: what runs a notebook (the ``notebook`` extra): its client, its format, and the kernel
JUPYTER_MODULES = ("nbclient", "nbformat", "ipykernel")


def is_notebook(executes: str | None) -> bool:
    """Whether ``executes`` names a Jupyter notebook (its first word ends in ``.ipynb``)."""
    words = (executes or "").split()
    return bool(words) and words[0].endswith(".ipynb")


def notebook_problem(path: Path) -> str | None:
    """Why the file at ``path`` cannot run as a notebook, in words, or None."""
    if not path.is_file():
        return f"the notebook {path.name} is not there ({path})"
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"{path.name} is not a notebook: not JSON ({e})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        return f"{path.name} is not a notebook of format 4 (nbformat 4, a list of cells)"
    return None


def absent_jupyter() -> list[str]:
    """Those of :data:`JUPYTER_MODULES` this interpreter cannot import."""
    import importlib.util
    return [m for m in JUPYTER_MODULES if importlib.util.find_spec(m) is None]
