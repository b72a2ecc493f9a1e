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
