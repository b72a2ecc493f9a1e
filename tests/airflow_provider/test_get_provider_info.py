import subprocess
import sys

from airflow_provider.get_provider_info import get_provider_info


def test_provider_metadata_and_listing(airflow_db):
    info = get_provider_info()
    for key in ("package-name", "name", "description", "connection-types", "extra-links", "triggers", "integrations"):
        assert info[key], key
    conn = info["connection-types"][0]
    assert conn["connection-type"] == "tony" and conn["hook-class-name"] == "airflow_provider.hooks.TonyHook"
    assert set(conn["conn-fields"]) >= {"backend", "hadoop_conf_dir", "rm_address", "rm_web_address", "webhdfs",
                                        "queue", "node_label", "principal", "keytab"}
    assert conn["conn-fields"]["keytab"]["schema"]["format"] == "password"  # shown masked
    listed = subprocess.run([sys.executable, "-m", "airflow", "providers", "list"], capture_output=True, text=True,
                            timeout=300, check=False)
    assert "tony-workflow" in listed.stdout


def test_providers_manager_sees_the_connection_type_and_links(airflow_db):
    from airflow.providers_manager import ProvidersManager
    pm = ProvidersManager()
    assert "tony" in pm.hooks
    assert pm.hooks["tony"].hook_class_name == "airflow_provider.hooks.TonyHook"
    assert "airflow_provider.links.TonyTensorBoardLink" in pm.extra_links_class_names
    widgets = pm.connection_form_widgets
    assert widgets["extra__tony__keytab"].is_sensitive
    assert not widgets["extra__tony__queue"].is_sensitive


def test_hook_defaults_to_the_embedded_cluster_and_reads_a_connection(airflow_db, monkeypatch):
    from airflow_provider.hooks import TonyHook
    hook = TonyHook()
    assert hook.backend == "local" and hook.connection_conf() == {}
    assert hook.get_conn().backend.name == "local"
    monkeypatch.setenv("AIRFLOW_CONN_TONY_Q",
                       '{"conn_type": "tony", "extra": {"backend": "local", "queue": "research", '
                       '"extra__tony__node_label": "gpu"}}')
    q = TonyHook("tony_q")
    assert q.connection_conf() == {"tony.yarn.queue": "research", "tony.application.node-label": "gpu"}
