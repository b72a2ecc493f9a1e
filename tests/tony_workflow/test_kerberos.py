"""A secure cluster's client side that needs no KDC (:mod:`tony_workflow.kerberos`): when a cluster
is secure, and the HDFS delegation token a YARN container is given, read from Hadoop's token file
in both of its formats and encoded as WebHDFS takes it. Logging in with a ticket is tested on the
Kerberized mini cluster (tests/tony_workflow/jobs/test_yarn_kerberos.py)."""
from __future__ import annotations

import base64
import io

import pytest

from tony_workflow.kerberos import (
    HDFS_TOKEN_KIND,
    DelegationToken,
    _read_vint,
    _write_vint,
    hdfs_delegation_token,
    is_secure,
    read_token_file,
)


def vint(value: int) -> bytes:
    out = io.BytesIO()
    _write_vint(out, value)
    return out.getvalue()


def writable_file(path, tokens: list[DelegationToken]):
    body = vint(len(tokens))
    for t in tokens:
        for part in (t.alias.encode(), t.identifier, t.password, t.kind.encode(), t.service.encode()):
            body += vint(len(part)) + part
    path.write_bytes(b"HDTS\x00" + body + vint(0))  # no secret keys
    return path


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def protobuf_file(path, tokens: list[DelegationToken]):
    entries = b"".join(field(1, field(1, t.alias.encode()) + field(2, field(1, t.identifier) + field(2, t.password)
                                                                  + field(3, t.kind.encode())
                                                                  + field(4, t.service.encode())))
                       for t in tokens)
    path.write_bytes(b"HDTS\x01" + varint(len(entries)) + entries)
    return path


HDFS = DelegationToken("ha-hdfs:ns1", b"\x00\x01id", b"secret", HDFS_TOKEN_KIND, "ha-hdfs:ns1")
OTHER_NN = DelegationToken("nn2", b"id2", b"pw2", HDFS_TOKEN_KIND, "10.0.0.9:8020")
RM = DelegationToken("rm", b"rmid", b"rmpw", "RM_DELEGATION_TOKEN", "10.0.0.1:8032")


def test_a_cluster_is_secure_when_its_configuration_says_kerberos():
    assert is_secure({"hadoop.security.authentication": "kerberos"})
    assert not is_secure({}) and not is_secure({"hadoop.security.authentication": "simple"})


@pytest.mark.parametrize("value", [0, 1, 127, 128, 255, 300, 65535, 2 ** 31 - 1])
def test_hadoops_vints_round_trip(value):
    assert _read_vint(io.BytesIO(vint(value))) == value


@pytest.mark.parametrize("write", [writable_file, protobuf_file], ids=["writable", "protobuf"])
def test_both_token_file_formats_are_read(tmp_path, write):
    assert read_token_file(write(tmp_path / "tokens", [RM, HDFS, OTHER_NN])) == [RM, HDFS, OTHER_NN]


def test_the_namenodes_token_is_chosen_and_encoded_as_webhdfs_takes_it(tmp_path):
    path = writable_file(tmp_path / "tokens", [RM, OTHER_NN, HDFS])
    encoded = hdfs_delegation_token("ns1", path)
    raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    assert raw == (vint(4) + b"\x00\x01id" + vint(6) + b"secret" + vint(len(HDFS_TOKEN_KIND))
                   + HDFS_TOKEN_KIND.encode() + vint(11) + b"ha-hdfs:ns1")
    assert hdfs_delegation_token("10.0.0.9:8020", path) == OTHER_NN.url_string()
    assert hdfs_delegation_token(None, path) == OTHER_NN.url_string()  # none named: the first HDFS token
    assert hdfs_delegation_token("ns1", writable_file(tmp_path / "rm-only", [RM])) is None
    assert hdfs_delegation_token("ns1", tmp_path / "missing") is None


@pytest.mark.parametrize("data, says", [
    (b"XXXX\x00", "is not a Hadoop token file"),
    (b"HDTS\x07\x00", "unknown format (7)"),
    (b"HDTS\x00\x01\x05ab", "ends in the middle of a record"),
])
def test_a_file_that_is_not_a_token_file_is_named(tmp_path, data, says):
    (tmp_path / "t").write_bytes(data)
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        read_token_file(tmp_path / "t")
