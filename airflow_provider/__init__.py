"""Airflow provider for tony-workflow: the ``tony`` connection, TonyOperator, its trigger and links."""
