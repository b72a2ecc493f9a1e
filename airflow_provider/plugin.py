"""The provider's Airflow plugin: the TonY pages (:mod:`airflow_provider.web`) mounted at ``/tony``,
a navigation entry to the jobs list, and a "TonY job" view on every task instance.

Installing the package is enough. Airflow 3.3 reads a provider's ``plugins`` metadata only when it
discovers providers eagerly (``[core] lazy_discover_providers = False``; the default is lazy), so
the plugin is also offered under the ``airflow.plugins`` entry point, as :data:`ENTRY_POINT`, which
names the plugin only while providers are discovered lazily: Airflow would otherwise find it twice
and report the second as an error. The external views' hrefs are relative: the UI shows them in a
frame of its own origin, where its session cookie authenticates the pages.
"""
from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from airflow_provider.web import create_app

__all__ = ["ENTRY_POINT", "TonyPlugin"]

URL_PREFIX = "/tony"


class TonyPlugin(AirflowPlugin):
    name = "tony"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "TonY"}]
    external_views: ClassVar[list[dict[str, str]]] = [
        {"name": "TonY jobs", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "tony-jobs"},
        # Airflow fills in the task instance's identity (MAP_INDEX only for a mapped one).
        {"name": "TonY job", "href": f"{URL_PREFIX}/ti/{{DAG_ID}}/{{RUN_ID}}/{{TASK_ID}}/{{MAP_INDEX}}",
         "destination": "task_instance", "url_route": "tony-job"},
    ]


def _entry_point() -> type[TonyPlugin] | None:
    from airflow import settings

    return TonyPlugin if settings.LAZY_LOAD_PROVIDERS else None


#: what the ``airflow.plugins`` entry point names: the plugin, unless Airflow loads it as the provider's
ENTRY_POINT = _entry_point()
