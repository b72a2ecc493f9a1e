"""The TonyOperator's extra links (:mod:`airflow_provider.links`): each reads one XCom the operator
pushes, under the name the UI shows. Links on a real task run are test_operators.py's."""
from __future__ import annotations

from airflow_provider.links import TonyLogsLink, TonyTensorBoardLink, TonyTrackingLink
from airflow_provider.operators import TonyOperator


def test_each_link_has_its_name_and_its_xcom():
    assert [(link.name, link.xcom_value_key) for link in TonyOperator.operator_extra_links] == [
        ("TensorBoard", "tensorboard_url"), ("TonY Application", "tracking_url"), ("TonY Task Logs", "logs_url")]
    assert {type(link) for link in TonyOperator.operator_extra_links} == {TonyTensorBoardLink, TonyTrackingLink,
                                                                         TonyLogsLink}
    # The UI reads a link's XCom under the link's own key, which the operator writes as the job starts.
    assert {link.xcom_key for link in TonyOperator.operator_extra_links} == {
        "_link_TonyTensorBoardLink", "_link_TonyTrackingLink", "_link_TonyLogsLink"}
