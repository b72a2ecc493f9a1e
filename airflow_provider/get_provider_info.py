"""Provider metadata, read by Airflow through the ``apache_airflow_provider`` entry point."""
from __future__ import annotations


def get_provider_info() -> dict:
    return {
        "package-name": "tony-workflow",
        "name": "TonY (tony-workflow)",
        "description": "Distributed TensorFlow and PyTorch training with guaranteed resources and fault "
                       "tolerance, on an embedded cluster or YARN (a Python take on LinkedIn's TonY).",
        "versions": ["0.1.0"],
        "integrations": [{
            "integration-name": "TonY",
            "external-doc-url": "https://github.com/tony-framework/TonY",
            "tags": ["software"],
        }],
        "operators": [{"integration-name": "TonY", "python-modules": ["airflow_provider.operators"]}],
        "hooks": [{"integration-name": "TonY", "python-modules": ["airflow_provider.hooks"]}],
        "triggers": [{"integration-name": "TonY", "python-modules": ["airflow_provider.triggers"]}],
        "extra-links": [
            "airflow_provider.links.TonyTensorBoardLink",
            "airflow_provider.links.TonyTrackingLink",
            "airflow_provider.links.TonyLogsLink",
        ],
        "connection-types": [{
            "connection-type": "tony",
            "hook-class-name": "airflow_provider.hooks.TonyHook",
            "hook-name": "TonY",
            "ui-field-behaviour": {
                "hidden-fields": ["host", "schema", "port", "login", "password"],
                "relabeling": {},
                "placeholders": {
                    "backend": "local or yarn",
                    "rm_address": "resourcemanager.example.com:8032",
                    "webhdfs": "http://namenode.example.com:9870",
                    "queue": "default",
                },
            },
            "conn-fields": {
                "backend": {"label": "Backend", "description": "local (embedded cluster) or yarn",
                            "schema": {"type": ["string", "null"], "enum": ["local", "yarn", None],
                                       "default": "local"}},
                "rm_address": {"label": "ResourceManager address",
                               "schema": {"type": ["string", "null"]}},
                "webhdfs": {"label": "WebHDFS address", "schema": {"type": ["string", "null"]}},
                "hadoop_conf_dir": {"label": "HADOOP_CONF_DIR",
                                    "description": "where the ResourceManager and HDFS addresses come from",
                                    "schema": {"type": ["string", "null"]}},
                "queue": {"label": "Queue", "schema": {"type": ["string", "null"]}},
                "node_label": {"label": "Node label", "schema": {"type": ["string", "null"]}},
                "principal": {"label": "Kerberos principal", "schema": {"type": ["string", "null"]}},
                "keytab": {"label": "Keytab", "schema": {"type": ["string", "null"], "format": "password"}},
                "history_dir": {"label": "History directory", "schema": {"type": ["string", "null"]}},
            },
        }],
    }
