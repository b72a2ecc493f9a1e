"""The task's program: what runs in each task container, and what user code imports there.

``executor`` reserves the task's port, registers with the AM, sets TF_CONFIG and the framework's
variables, runs the user's command, heartbeats and reports its end; ``forkserver`` forks executors
from one warm interpreter on the embedded cluster; ``metrics`` samples the task's resources;
``reporting`` is what user code calls (``tony_workflow.report``) to say how far it has got;
``checkpoints`` chooses the checkpoint a new session resumes from, and ``checkpoint_mirror`` keeps
the chief's checkpoint directory mirrored to the store.

Nothing is imported here: an executor's start-up pays only for what it uses.
"""
