"""The Azkaban job type: ``TensorFlowJob`` and ``TonyJob`` ``.job`` files run on tony-workflow.

``props`` reads Java properties and resolves them as Azkaban does, ``flow`` loads whole projects
(Flow 1.0 and 2.0), ``translate`` turns a job's props into a :class:`~tony_workflow.spec.JobSpec`,
``runner`` is the process Azkaban's ProcessJob starts, and ``plugin`` writes the job type's plugin
folder. ``cli`` is the ``tony-azkaban`` command.
"""
