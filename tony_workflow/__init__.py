"""tony-workflow: distributed TensorFlow and PyTorch training as a workflow job type.

User code imports :func:`report` from here to tell its job how far training has got; the rest of
the package is the runtime (client, ApplicationMaster, executors) and is imported by its own modules.
"""
from .task.reporting import report

__all__ = ["report"]
