"""Hadoop's configuration as a client reads and writes it (:mod:`tony_workflow.hadoop`): site files
with Hadoop's ``${var}`` expansion, and the properties that point a client at a cluster from its
addresses alone."""
from __future__ import annotations

import pytest

from tony_workflow.errors import ConfigError
from tony_workflow.hadoop import address_conf, read_conf, rm_web_url, site_xml


def test_site_files_are_read_later_files_winning_and_references_expanded(tmp_path):
    (tmp_path / "core-site.xml").write_text(site_xml({"fs.defaultFS": "hdfs://nn:8020", "x.enabled": True}))
    (tmp_path / "yarn-site.xml").write_text(site_xml({
        "yarn.resourcemanager.hostname": "rm.example",
        "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088",
        "x.enabled": "false"}))
    conf = read_conf(tmp_path, ("core-site.xml", "yarn-site.xml"))
    assert conf["yarn.resourcemanager.webapp.address"] == "rm.example:8088"
    assert conf["x.enabled"] == "false" and conf["fs.defaultFS"] == "hdfs://nn:8020"
    assert read_conf(None) == {} and read_conf(tmp_path / "missing") == {}


def test_a_broken_site_file_is_named(tmp_path):
    (tmp_path / "yarn-site.xml").write_text("<configuration><property>")
    with pytest.raises(ValueError, match="yarn-site.xml"):
        read_conf(tmp_path, ("yarn-site.xml",))


def test_addresses_alone_make_a_clients_configuration():
    sites = address_conf(rm_address="rm.example", webhdfs="https://nn.example")
    assert sites["yarn-site.xml"] == {"yarn.resourcemanager.hostname": "rm.example",
                                      "yarn.resourcemanager.address": "rm.example:8032",
                                      "yarn.http.policy": "HTTP_ONLY",
                                      "yarn.resourcemanager.webapp.address": "rm.example:8088"}
    assert sites["hdfs-site.xml"] == {"dfs.http.policy": "HTTPS_ONLY", "dfs.namenode.https-address": "nn.example:9871"}
    assert sites["core-site.xml"] == {"fs.defaultFS": "hdfs://nn.example:8020"}
    assert rm_web_url(sites["yarn-site.xml"]) == "http://rm.example:8088"
    assert address_conf() == {}


@pytest.mark.parametrize("kwargs, says", [
    ({"rm_address": "http://rm:8088"}, "'http://rm:8088' must be host[:port]"),
    ({"rm_web_address": "ftp://rm"}, "must be http://host[:port] or https://host[:port]"),
    ({"webhdfs": "nn:notaport"}, "webhdfs 'nn:notaport' must be"),
])
def test_a_bad_address_is_refused_naming_it(kwargs, says):
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        address_conf(**kwargs)


def test_the_namenodes_rpc_port_is_what_it_says_of_itself():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tony_workflow.hadoop import namenode_rpc_port

    asked = []

    class NameNodeWeb(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            body = json.dumps({"beans": [{"name": "Hadoop:service=NameNode,name=NameNodeStatus",
                                          "State": "active", "HostAndPort": "nn.example:34603"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NameNodeWeb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        web = f"http://127.0.0.1:{server.server_address[1]}"
        assert namenode_rpc_port(web) == 34603
        assert asked and asked[0].startswith("/jmx?qry=Hadoop")
        sites = address_conf(webhdfs=web, namenode_port=34603)
        assert sites["core-site.xml"] == {"fs.defaultFS": "hdfs://127.0.0.1:34603"}
    finally:
        server.shutdown()
    # nobody there: no port, and the caller falls back to Hadoop's default
    assert namenode_rpc_port(web, timeout=1) is None
