"""A Jupyter notebook as a task's program: ``executes: train.ipynb``.

The notebook runs top to bottom, non-interactively, in a kernel started from the task's own
interpreter, so that its cells see what any task's command sees (``TONY_*``, ``TF_CONFIG``, the
checkpoint and log directories, the GPUs pinned to the task). Parameters come from
``task_params`` (``--lr 0.01 --epochs 3`` or ``lr=0.01 epochs=3``) and are injected as papermill
does: a code cell tagged ``injected-parameters``, assigning them, right after the cell tagged
``parameters`` (at the top when there is none), so that they override its defaults. Values are
Python literals where they read as one (``0.01``, ``3``, ``True``, ``[1, 2]``), else strings.

What each cell prints goes to the task's stdout and stderr as the cell ends, so that followers of
the task's output (``tony logs --follow``, the Airflow task log) read it while the notebook runs.
The executed notebook, with every output, is written to the container's log directory (YARN's
``LOG_DIRS``, else the working directory) as ``<name>.executed.ipynb``. A cell that raises ends
the task with exit status 1 after that cell's traceback on stderr; the cells after it do not run.

Run as ``python -m tony_workflow.task.notebook NOTEBOOK [PARAMS...]``; what the client checks
before anything is submitted is :func:`tony_workflow.spec.notebook.notebook_problem`.
"""
from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..spec.notebook import absent_jupyter, is_notebook, notebook_problem

__all__ = ["executed_path", "is_notebook", "parameters", "run"]

_PARAMETERS_TAG, _INJECTED_TAG = "parameters", "injected-parameters"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parameters(args: list[str]) -> dict[str, Any]:
    """``--name value`` (``--flag`` alone: True) and ``name=value`` arguments, as a notebook's
    parameters. Raises ValueError for a word that is neither, or a name Python cannot assign."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--"):
            name, eq, text = word[2:].partition("=")
            if not eq:
                if i + 1 < len(args) and not args[i + 1].startswith("--"):
                    text, i = args[i + 1], i + 1
                else:
                    text = "True"
        elif "=" in word:
            name, _, text = word.partition("=")
        else:
            raise ValueError(f"{word!r} is not a parameter: give --name value or name=value")
        name = name.replace("-", "_")
        if not name.isidentifier():
            raise ValueError(f"{name!r} cannot be a notebook parameter: not a Python name")
        out[name] = _value(text)
        i += 1
    return out


def executed_path(notebook: Path, environ: dict[str, str] | None = None) -> Path:
    """Where the executed copy of ``notebook`` is written: the container's log directory."""
    env = os.environ if environ is None else environ
    logs = (env.get("LOG_DIRS") or "").split(",")[0]
    return Path(logs or ".") / f"{notebook.stem}.executed.ipynb"


def _inject(nb: Any, params: dict[str, Any]) -> None:
    import nbformat
    nb.cells = [c for c in nb.cells if _INJECTED_TAG not in c.get("metadata", {}).get("tags", [])]
    if not params:
        return
    source = "# Parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in params.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [_INJECTED_TAG]})
    at = next((i + 1 for i, c in enumerate(nb.cells) if _PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])), 0)
    nb.cells.insert(at, cell)


def _say(cell: Any) -> None:
    """A cell's outputs, once it ran, onto this process's stdout and stderr."""
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            (sys.stderr if out.get("name") == "stderr" else sys.stdout).write(out.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            text = out.get("data", {}).get("text/plain")
            if text:
                sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()
    sys.stderr.flush()


def run(notebook: Path, params: dict[str, Any], out: Path) -> int:
    """Executes ``notebook`` with ``params``, writing the executed copy to ``out``: 0 when every
    cell ran, 1 when one raised (its traceback on stderr)."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(notebook, as_version=4)
    _inject(nb, params)
    # The kernel is this interpreter (ipykernel's own kernel spec): the task's environment and
    # packages. It is reached over local sockets, not TCP ports that anyone on a shared node could
    # connect to.
    # In a folder of its own, private, under a short path: a socket's path is at most 107 bytes,
    # which a container's directory alone can pass.
    sockets = Path(tempfile.mkdtemp(prefix="tony-kernel-"))
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(sockets / "k"))
    client = NotebookClient(nb, km=km, timeout=None, allow_errors=False,
                            resources={"metadata": {"path": str(Path.cwd())}},
                            on_cell_executed=lambda cell, cell_index, execute_reply: _say(cell))
    code = 0
    try:
        client.execute()
    except CellExecutionError as e:
        code = 1
        said = _ANSI.sub("", str(e))  # IPython colours its tracebacks: a log shows them as they are
        print(f"tony: a cell of {notebook.name} raised; the cells after it did not run:\n{said}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the kernel did not start or died: said in a line, no traceback
        code = 1
        print(f"tony: the kernel running {notebook.name} failed: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):  # nbclient ends the kernel; this one makes sure of it
            if km.has_kernel:
                km.shutdown_kernel(now=True)
        shutil.rmtree(sockets, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
        print(f"tony: the executed notebook is {out}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m tony_workflow.task.notebook NOTEBOOK [--name value | name=value ...]", file=sys.stderr)
        return 2
    notebook = Path(args[0])
    problem = notebook_problem(notebook)
    said = [problem] if problem else []
    try:
        params = parameters(args[1:])
    except ValueError as e:
        said.append(str(e))
    if said:
        for line in said:
            print(f"tony: {line}", file=sys.stderr)
        return 2
    absent = absent_jupyter()
    if absent:
        print(f"tony: running a notebook needs {', '.join(absent)} in the task's environment (the notebook "
              "extra: pip install 'tony-workflow[notebook]')", file=sys.stderr)
        return 2
    return run(notebook, params, executed_path(notebook))


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not through the interpreter's own exit: a kernel that failed to start can leave ZeroMQ
    # sockets whose context then waits for good at exit, and the task would never end.
    os._exit(status)
