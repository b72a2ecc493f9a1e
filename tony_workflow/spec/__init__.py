"""Job specifications: which tasks to run, how many, with what resources and commands.

A job is described by TonY's flat ``tony.*`` configuration, with the same key names and defaults as
TonY's ``tony-default.xml``. It can be written three ways, all ending in one :class:`JobSpec` whose
``conf`` is the single source of truth:

* TonY XML: a Hadoop ``<configuration>`` file, read by :func:`load_tony_xml`.
* YAML or JSON, read by :func:`spec_from_mapping`, with friendlier names that map onto ``tony.*`` keys::

      name: mnist                 # tony.application.name
      framework: tensorflow       # tony.application.framework (one of FRAMEWORKS)
      queue: default              # tony.yarn.queue
      node_label: gpu             # tony.application.node-label
      tags: [team-a, nightly]     # tony.application.tags (a list or a comma-separated string)
      command: python train.py    # tony.containers.command: the command of every task type
      env: {KEY: value}           # tony.containers.envs (a mapping, or a list of "KEY=value")
      execution_env: {KEY: value} # tony.execution.envs (same forms)
      resources: [data.zip]       # tony.containers.resources (a list or a comma-separated string)
      retries: 2                  # tony.am.retry-count (each key may be set by one spelling only)
      timeout: 3600000            # tony.application.timeout, in milliseconds
      am: {memory: 1g, vcores: 1, gpus: 0}          # tony.am.memory / vcores / gpus
      tasks:
        worker:                   # a task type: tony.worker.*
          instances: 2            # tony.worker.instances (1 when the task is listed without it)
          memory: 4g              # tony.worker.memory
          vcores: 2               # tony.worker.vcores
          gpus: 0                 # tony.worker.gpus
          command: ...            # tony.worker.command
          node_label: x           # tony.worker.node-label
          docker_image: img       # tony.docker.worker.image (and tony.docker.enabled=true unless set)
          restart_policy: task    # tony.worker.restart-policy: session | task
          timeout: 0              # tony.worker.timeout, in milliseconds
          spread: true            # tony.worker.spread: on distinct nodes of a YARN cluster where it can
        ps: {instances: 1}
      conf: {tony.task.metrics-interval-ms: 10000}  # any flat key; values: strings, numbers, booleans, lists
      tony.task.heartbeat-interval-ms: 500   # flat tony.* keys are also accepted at the top level
      x-defaults: &defaults {memory: 4g}      # x-* keys are ignored: room for YAML anchors
      # What TonY takes as client arguments rather than configuration:
      executes: train.py          # the script the default command runs
      task_params: --epochs 3     # its arguments
      python_binary_path: python3 # its interpreter ("python" when unset)
      python_venv: venv.zip       # a virtualenv directory or zip shipped to every container
      src_dir: .                  # the source directory shipped to every container
      shell_env: {KEY: value}     # extra environment of the user process

Loading (:func:`load_spec`, :func:`load_job`) reads a file, renders it as a Jinja2 template, parses
it, lays it over :data:`TONY_DEFAULTS` and applies ``--conf`` overrides. It does not validate:
:meth:`JobSpec.validate` reports every problem at once, each naming the key as the user wrote it, the
bad value, and what is allowed.

The package, one concern a module, each importing only those before it:
:mod:`.errors` (SpecIssue, SpecError), :mod:`.keys` (the key catalogue and defaults), :mod:`.notebook`
(a notebook as what a job executes), :mod:`.values`
(value parsers), :mod:`.overrides` (``key=value`` pairs), :mod:`.validation` and :mod:`.model` (the
JobSpec), :mod:`.document` (YAML/JSON/XML readers), :mod:`.render` (Jinja2), :mod:`.loading`, and :mod:`.site` (the local cluster's own settings,
which come from the site configuration and never from a job).
"""
from __future__ import annotations

from .document import spec_from_mapping
from .errors import SpecError, SpecIssue
from .keys import FRAMEWORKS, LOCAL_CLUSTER_DEFAULTS, MULTI_VALUE_KEYS
from .loading import load_job, load_spec, load_tony_xml, site_conf
from .model import JobSpec, Resources, TaskSpec
from .overrides import apply_overrides, parse_pairs
from .render import render_template
from .site import LocalCapacity, LocalSettings, local_settings
from .table import PROJECT_DEFAULTS, TONY_DEFAULTS
from .values import parse_memory

__all__ = [
           "FRAMEWORKS",
           "LOCAL_CLUSTER_DEFAULTS",
           "MULTI_VALUE_KEYS",
           "PROJECT_DEFAULTS",
           "TONY_DEFAULTS",
           "JobSpec",
           "LocalCapacity",
           "LocalSettings",
           "Resources",
           "SpecError",
           "SpecIssue",
           "TaskSpec",
           "apply_overrides",
           "load_job",
           "load_spec",
           "load_tony_xml",
           "local_settings",
           "parse_memory",
           "parse_pairs",
           "render_template",
           "site_conf",
           "spec_from_mapping",
]
