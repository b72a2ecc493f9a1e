"""The checkpoint handoff of an elastic job's container: its elastic side (torch's agent, or the
trainer that regroups in place) asks its executor, which holds the container's checkpoint mirror,
to act on the container's checkpoint directory as its group changes.

The executor mirrors the directory of the container that holds rank 0, wherever rank 0 is, and
no other: the rendezvous decides which container that is, round after round. A request is a JSON
file in the directory ``TONY_CHECKPOINT_HANDOFF`` names (written whole, then renamed); the
executor answers each in a file beside it. Asked in order:

- ``{"flush": true}``: push what the directory holds now to the store (the container held rank 0
  in the group that just ended: its saves are the group's newest);
- ``{"pull": true}``: replace what the store holds into the directory (another container's saves
  are the newest, or rank 0's container is gone and the store has its last);
- ``{"rank0": true|false}``: whether this container holds rank 0 from now on (its executor's
  mirror then pushes its saves).

Both sides are in the same container: a loopback file exchange needs no port and no token.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["HANDOFF_ENV", "HandoffError", "ask", "serve"]

HANDOFF_ENV = "TONY_CHECKPOINT_HANDOFF"
_POLL_S = 0.05
_counter = itertools.count()


class HandoffError(RuntimeError):
    """The executor did not answer, or could not do what it was asked."""


def ask(request: dict[str, Any], folder: str | os.PathLike[str] | None = None, timeout: float = 900.0) -> dict[str, Any]:
    """Asks this container's executor to do ``request`` and waits for its answer; a container
    whose executor hands nothing over (no ``TONY_CHECKPOINT_HANDOFF``) answers ``{"ok": True}``."""
    where = folder or os.environ.get(HANDOFF_ENV)
    if not where:
        return {"ok": True, "skipped": True}
    name = f"{os.getpid()}-{time.monotonic_ns()}-{next(_counter)}"
    base = Path(where)
    tmp, asked, answer = base / f".{name}.tmp", base / f"{name}.request", base / f"{name}.answer"
    tmp.write_text(json.dumps(request))
    tmp.rename(asked)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reply: dict[str, Any] = json.loads(answer.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(_POLL_S)
            continue
        with contextlib.suppress(OSError):
            answer.unlink()
        if not reply.get("ok"):
            raise HandoffError(str(reply.get("error") or "the executor could not hand the checkpoint over"))
        return reply
    with contextlib.suppress(OSError):
        asked.unlink()
    raise HandoffError(f"the container's executor did not answer {request} in {timeout:g} s")


def serve(folder: Path, handle: Callable[[dict[str, Any]], dict[str, Any]], stop: threading.Event) -> threading.Thread:
    """Answers the requests that appear in ``folder`` with ``handle``, one at a time in the order
    they came, until ``stop`` is set; returns the thread that does."""
    folder.mkdir(parents=True, exist_ok=True)

    def loop() -> None:
        while not stop.wait(_POLL_S):
            for asked in sorted(folder.glob("*.request"), key=lambda p: p.stat().st_mtime_ns if p.exists() else 0):
                try:
                    request = json.loads(asked.read_text())
                    reply = handle(request) if isinstance(request, dict) else {"ok": False, "error": "not an object"}
                except FileNotFoundError:
                    continue
                except Exception as e:  # noqa: BLE001 - the asker is told; the executor goes on
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                answer = asked.with_suffix(".answer")
                tmp = asked.with_suffix(".answering")
                tmp.write_text(json.dumps(reply))
                tmp.rename(answer)
                with contextlib.suppress(OSError):
                    asked.unlink()

    thread = threading.Thread(target=loop, name="checkpoint-handoff", daemon=True)
    thread.start()
    return thread
