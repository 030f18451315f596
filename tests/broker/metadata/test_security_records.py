"""Security metadata (issue 23): SCRAM credentials, ACL bindings and client quotas as records,
their validation, their fold into the image, and the image's records for a snapshot."""

from __future__ import annotations

import pytest

from pylog_nb.broker.controller.events import describe
from pylog_nb.broker.controller.quorum import image_records
from pylog_nb.broker.metadata.image import ClusterImage, apply, replay
from pylog_nb.broker.metadata.records import (
    AccessControlEntry,
    ClientQuota,
    MetadataRecordError,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
    b64encode,
    record_from_json,
)
from pylog_nb.broker.security.sasl import ScramCredential

ACL_ID = "6f1f1c3e-8d0a-4a53-9f5e-4a3c8a1b2c3d"


def scram(name="alice", mechanism="SCRAM-SHA-256", iterations=4096) -> UserScramCredential:
    return UserScramCredential(name=name, mechanism=mechanism, salt=b64encode(b"salt"),
                               stored_key=b64encode(b"s" * 32), server_key=b64encode(b"k" * 32),
                               iterations=iterations)


def acl(acl_id=ACL_ID, **changes) -> AccessControlEntry:
    fields = dict(id=acl_id, resource_type=2, resource_name="orders", pattern_type=3,
                  principal="User:alice", host="*", operation=3, permission_type=3)
    return AccessControlEntry(**{**fields, **changes})


def quota(entity=(("user", "alice"),), key="producer_byte_rate", value=1024.0,
          remove=False) -> ClientQuota:
    return ClientQuota(entity=entity, key=key, value=value, remove=remove)


def every_kind() -> list:
    return [scram(), scram(mechanism="SCRAM-SHA-512", iterations=8192),
            RemoveUserScramCredential(name="alice", mechanism="SCRAM-SHA-256"),
            acl(), RemoveAccessControlEntry(id=ACL_ID),
            quota(), quota(entity=(("client-id", None), ("user", None)),
                           key="request_percentage", value=12.5),
            quota(remove=True)]


@pytest.mark.parametrize("record", every_kind(), ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_its_json(record) -> None:
    assert record_from_json(record.to_json()) == record
    assert record_from_json(record.to_json()).to_json() == record.to_json()


@pytest.mark.parametrize("build", [
    lambda: scram(name=""),
    lambda: scram(mechanism="SCRAM-SHA-1"),
    lambda: scram(iterations=4095),
    lambda: scram(iterations=16385),
    lambda: UserScramCredential(name="a", mechanism="SCRAM-SHA-256", salt="not base64!",
                                stored_key="AA==", server_key="AA==", iterations=4096),
    lambda: RemoveUserScramCredential(name="a", mechanism="PLAIN"),
    lambda: acl(resource_type=1),  # ANY: filters only
    lambda: acl(pattern_type=2),  # MATCH: filters only
    lambda: acl(operation=1),
    lambda: acl(permission_type=0),
    lambda: acl(principal="alice"),
    lambda: acl(principal="User:"),
    lambda: acl(resource_name=""),
    lambda: acl(host=""),
    lambda: acl(acl_id=""),
    lambda: RemoveAccessControlEntry(id=""),
    lambda: quota(entity=()),
    lambda: quota(entity=(("ip", "10.0.0.1"),)),
    lambda: quota(entity=(("user", "a"), ("user", "b"))),
    lambda: quota(entity=(("user", ""),)),
    lambda: quota(key="fetch_rate"),
    lambda: quota(value=-1.0),
    lambda: quota(value=float("inf")),
    lambda: quota(value=1.5),  # a byte rate is whole bytes
])
def test_bad_records_are_refused_when_built(build) -> None:
    with pytest.raises(MetadataRecordError):
        build()


def test_a_quota_entity_is_canonical_whatever_its_order() -> None:
    a = quota(entity=(("user", "u"), ("client-id", "c")))
    b = quota(entity=[["client-id", "c"], ["user", "u"]])
    assert a == b and a.entity == (("client-id", "c"), ("user", "u"))


def test_the_image_folds_credentials_acls_and_quotas() -> None:
    image = replay([scram(), scram(mechanism="SCRAM-SHA-512"), acl(), quota(),
                    quota(key="consumer_byte_rate", value=2048)])
    credential = image.scram_credentials[("alice", "SCRAM-SHA-256")]
    assert credential == ScramCredential("SCRAM-SHA-256", b"salt", b"s" * 32, b"k" * 32, 4096)
    assert image.acls == {ACL_ID: acl()}
    assert image.client_quotas == {(("user", "alice"),): {"producer_byte_rate": 1024.0,
                                                          "consumer_byte_rate": 2048.0}}
    image = replay([RemoveUserScramCredential(name="alice", mechanism="SCRAM-SHA-256"),
                    RemoveAccessControlEntry(id=ACL_ID), quota(remove=True),
                    quota(key="consumer_byte_rate", remove=True)], image)
    assert list(image.scram_credentials) == [("alice", "SCRAM-SHA-512")]
    assert image.acls == {} and image.client_quotas == {}  # no quota left: no entity left


@pytest.mark.parametrize("record", [
    RemoveUserScramCredential(name="alice", mechanism="SCRAM-SHA-256"),
    RemoveAccessControlEntry(id=ACL_ID),
    quota(remove=True),
])
def test_removing_what_is_not_there_is_refused(record) -> None:
    with pytest.raises(MetadataRecordError):
        apply(ClusterImage.empty(), record)


def test_an_acl_id_is_used_once() -> None:
    with pytest.raises(MetadataRecordError, match="already in use"):
        replay([acl(), acl(principal="User:bob")])


def test_image_records_carry_every_security_kind_through_a_snapshot() -> None:
    image = replay([scram(), scram(name="bob", mechanism="SCRAM-SHA-512"), acl(),
                    acl(acl_id="b", resource_type=4, resource_name="kafka-cluster"),
                    quota(), quota(entity=(("client-id", None),), key="request_percentage",
                                   value=50.0)])
    records = image_records(image)
    reloaded = replay(record_from_json(r.to_json()) for r in records)
    assert reloaded == image
    kinds = {type(r).__name__ for r in records}
    assert {"UserScramCredential", "AccessControlEntry", "ClientQuota"} <= kinds


def test_to_dict_shows_who_has_credentials_but_never_the_keys() -> None:
    described = replay([scram(), acl(), quota()]).to_dict()
    assert described["scram_credentials"] == [
        {"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    assert "stored_key" not in str(described)
    assert described["acls"][0]["principal"] == "User:alice"
    assert described["client_quotas"] == [{"entity": [["user", "alice"]],
                                           "values": {"producer_byte_rate": 1024.0}}]


def test_events_describe_the_new_records() -> None:
    image = ClusterImage.empty()
    for record in every_kind():
        kind, text = describe(image, record)[0]
        assert kind != "record" and "stored" not in text
        image = apply(image, record)
