"""Provider metadata, read by Airflow through the ``apache_airflow_provider`` entry point.

It also describes the ``tony`` connection's form: every field shown there is read by
:class:`~airflow_provider.hooks.TonyHook`.
"""
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
        # The TonY pages in Airflow's UI (airflow_provider.web): jobs list, job page, task-instance view.
        "plugins": [{"name": "tony", "plugin-class": "airflow_provider.plugin.TonyPlugin"}],
        "connection-types": [{
            "connection-type": "tony",
            "hook-class-name": "airflow_provider.hooks.TonyHook",
            "hook-name": "TonY",
            "ui-field-behaviour": {
                "hidden-fields": ["host", "schema", "port", "login", "password"],
                "relabeling": {},
                "placeholders": {
                    "backend": "local or yarn",
                    "hadoop_conf_dir": "/etc/hadoop/conf",
                    "rm_address": "resourcemanager.example.com:8032",
                    "rm_web_address": "http://resourcemanager.example.com:8088",
                    "webhdfs": "http://namenode.example.com:9870",
                    "queue": "default",
                    "node_label": "gpu",
                    "principal": "tony@EXAMPLE.COM",
                    "keytab": "/etc/security/keytabs/tony.keytab",
                },
            },
            # Every field here changes what the hook does; the YARN ones are YarnBackend's arguments.
            "conn-fields": {
                "backend": {"label": "Backend", "description": "local (the embedded cluster) or yarn",
                            "schema": {"type": ["string", "null"], "enum": ["local", "yarn", None],
                                       "default": "local"}},
                "hadoop_conf_dir": {"label": "Hadoop conf directory",
                                    "description": "yarn: a HADOOP_CONF_DIR on the Airflow machines (default: "
                                                   "$HADOOP_CONF_DIR); the addresses below win over its own",
                                    "schema": {"type": ["string", "null"]}},
                "rm_address": {"label": "ResourceManager address",
                               "description": "yarn: the ResourceManager's RPC address host:port "
                                              "(yarn.resourcemanager.address, port 8032 by default), where "
                                              "jobs are submitted",
                               "schema": {"type": ["string", "null"]}},
                "rm_web_address": {"label": "ResourceManager web address",
                                   "description": "yarn: http(s)://host:port of the ResourceManager's web UI and "
                                                  "REST API (default: port 8088 on the ResourceManager address's "
                                                  "host)",
                                   "schema": {"type": ["string", "null"]}},
                "webhdfs": {"label": "WebHDFS address",
                            "description": "yarn: http(s)://host:port of the NameNode's web server (port 9870 "
                                           "by default); checkpoints and final job statuses go to that HDFS, "
                                           "which is also the default filesystem unless the conf directory "
                                           "names one",
                            "schema": {"type": ["string", "null"]}},
                "queue": {"label": "Queue", "description": "yarn: the queue jobs are submitted to (tony.yarn.queue)",
                          "schema": {"type": ["string", "null"]}},
                "node_label": {"label": "Node label",
                               "description": "yarn: the node label of the job's containers "
                                              "(tony.application.node-label; a task type's own label wins)",
                               "schema": {"type": ["string", "null"]}},
                "principal": {"label": "Kerberos principal",
                              "description": "yarn: with the keytab, who the YARN client logs in as",
                              "schema": {"type": ["string", "null"]}},
                "keytab": {"label": "Keytab", "description": "yarn: the keytab file of the principal",
                           "schema": {"type": ["string", "null"], "format": "password"}},
            },
        }],
    }
