"""Extra links on a TonyOperator task. A link reads XCom and nothing else."""
from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

__all__ = ["TonyLogsLink", "TonyTensorBoardLink", "TonyTrackingLink"]


class _XComLink(BaseOperatorLink):
    xcom_value_key: str = ""

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom
        return XCom.get_value(ti_key=ti_key, key=self.xcom_value_key) or ""


class TonyTensorBoardLink(_XComLink):
    name = "TensorBoard"
    xcom_value_key = "tensorboard_url"


class TonyTrackingLink(_XComLink):
    """The application's tracking page (on YARN, the ResourceManager's application page)."""

    name = "TonY Application"
    xcom_value_key = "tracking_url"


class TonyLogsLink(_XComLink):
    name = "TonY Task Logs"
    xcom_value_key = "logs_url"
