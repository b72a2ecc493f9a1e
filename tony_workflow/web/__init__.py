"""The TonY job pages and the history server that serves them on their own.

:mod:`.pages` holds the views (the jobs list, a job's page, its event log and its TensorBoard once
it has ended), which both the history server (:mod:`.server`, ``tony history serve``) and the
pages inside Airflow's UI (:mod:`airflow_provider.web`) serve. :mod:`.index` keeps the history's
summaries in memory for the list, :mod:`.access` says who is asking and what they may see, and
:mod:`.boards` runs the finished jobs' TensorBoards.
"""
