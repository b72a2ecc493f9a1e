"""What a submission says while it works, where its user is looking.

Shipping a job to YARN can take minutes the first time (packing and uploading its environment):
the parts that do it say how far they have got through the ``tony.ship`` logger, and whoever
submits (the ``tony`` command, the Azkaban job type, the Airflow hook) passes those lines on to its
own output with :func:`saying`, so that nothing is silent for more than a few seconds.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

__all__ = ["SHIP_LOGGER", "saying"]

#: The logger of what a submission does as it ships the job.
SHIP_LOGGER = "tony.ship"


class _Say(logging.Handler):
    def __init__(self, say: Callable[[str], None]):
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            self.say(f"warning: {text}" if record.levelno >= logging.WARNING else text)
        except Exception:  # noqa: BLE001 - a line that cannot be said must not stop the submission
            self.handleError(record)


@contextlib.contextmanager
def saying(say: Callable[[str], None]) -> Iterator[None]:
    """Within it, what the submission says (``tony.ship``, INFO and above) goes to ``say``, and
    not on to the loggers above (which would print it twice)."""
    logger = logging.getLogger(SHIP_LOGGER)
    handler = _Say(say)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
