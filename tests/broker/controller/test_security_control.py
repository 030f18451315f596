"""The controller's security decisions (issue 23): SCRAM credentials, ACLs and client quotas,
each item validated with Kafka's codes and answered on its own; the bootstrap users; and the
records surviving a snapshot of a real QuorumController."""

from __future__ import annotations

import base64
import hashlib
import random
from pathlib import Path

import pytest
from scramp import ScramClient

from pylog_nb.broker.controller import ClusterImage, Controller
from pylog_nb.broker.controller import errors as codes
from pylog_nb.broker.controller.quorum import QuorumController
from pylog_nb.broker.controller.security_control import (
    describe_client_quotas,
    describe_user_scram_credentials,
)
from pylog_nb.broker.metadata.records import record_from_json
from pylog_nb.broker.raft.log import RaftLog
from pylog_nb.broker.raft.node import RaftNode
from pylog_nb.broker.raft.quorum_state import QuorumStateStore
from pylog_nb.broker.security.sasl import SaslServer, scram_credential


class MemoryJournal:
    """The ``Journal`` protocol in memory (as test_controller's)."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.end_offset = 0

    def append(self, records: list) -> int:
        self.batches.append(list(records))
        self.end_offset += len(records)
        return self.end_offset - 1

    def close(self) -> None:
        pass

SHA256 = "SCRAM-SHA-256"
SHA512 = "SCRAM-SHA-512"
TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, WRITE, ALL = 3, 4, 2
DENY, ALLOW = 2, 3


def fresh() -> Controller:
    return Controller(MemoryJournal(), image=ClusterImage.empty(), now_ms=0)


def upsertion(name="alice", mechanism=SHA256, password="secret", iterations=4096,
              salt=b"0123456789abcdef") -> dict:
    digest = "sha256" if mechanism != SHA512 else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    return {"name": name, "mechanism": mechanism, "iterations": iterations,
            "salt": base64.b64encode(salt).decode(),
            "salted_password": base64.b64encode(salted).decode()}


def codes_of(results) -> dict:
    return {r["user"]: r["error_code"] for r in results}


# -- SCRAM -----------------------------------------------------------------------------------------


def test_an_upserted_credential_authenticates_a_scram_client() -> None:
    ctl = fresh()
    result = ctl.alter_user_scram_credentials([], [upsertion(), upsertion("bob", SHA512)])
    assert result.value == [
        {"user": "alice", "error_code": 0, "error_message": None},
        {"user": "bob", "error_code": 0, "error_message": None}]
    assert len(result.records) == 2 and journal_batches(ctl) == 1  # one atomic batch
    for user, mechanism in (("alice", SHA256), ("bob", SHA512)):
        server = SaslServer(mechanism, plain=lambda u, p: False,
                            scram=lambda u, m: ctl.image.scram_credentials.get((u, m)))
        client = ScramClient([mechanism], user, "secret")
        client.set_server_first(server.step(client.get_client_first().encode()).decode())
        client.set_server_final(server.step(client.get_client_final().encode()).decode())
        assert server.principal == user


def journal_batches(ctl: Controller) -> int:
    assert isinstance(ctl.journal, MemoryJournal)
    return len(ctl.journal.batches)


def test_each_user_is_refused_with_kafkas_code_and_the_others_still_pass() -> None:
    ctl = fresh()
    result = ctl.alter_user_scram_credentials(
        [{"name": "ghost", "mechanism": SHA256},  # nothing to delete
         {"name": "mechs", "mechanism": SHA256},  # a user once per request, whatever for
         {"name": "twice", "mechanism": SHA256}],
        [upsertion("ok"), upsertion("md5", mechanism="SCRAM-MD5"),
         upsertion("few", iterations=4095), upsertion("many", iterations=16385),
         upsertion(""), upsertion("twice"), upsertion("mechs", SHA512),
         {**upsertion("short"), "salted_password": base64.b64encode(b"x").decode()}])
    assert codes_of(result.value) == {
        "ghost": codes.RESOURCE_NOT_FOUND, "twice": codes.DUPLICATE_RESOURCE, "ok": 0,
        "mechs": codes.DUPLICATE_RESOURCE,
        "md5": codes.UNSUPPORTED_SASL_MECHANISM, "few": codes.UNACCEPTABLE_CREDENTIAL,
        "many": codes.UNACCEPTABLE_CREDENTIAL, "": codes.UNACCEPTABLE_CREDENTIAL,
        "short": codes.UNACCEPTABLE_CREDENTIAL}
    assert [r.name for r in result.records] == ["ok"]  # type: ignore[attr-defined]
    assert list(ctl.image.scram_credentials) == [("ok", SHA256)]


def test_a_deletion_removes_one_mechanism_and_describe_lists_what_is_left() -> None:
    ctl = fresh()
    ctl.alter_user_scram_credentials([], [upsertion(), upsertion("bob")])
    ctl.alter_user_scram_credentials([], [upsertion(mechanism=SHA512, iterations=8192)])
    assert describe_user_scram_credentials(ctl.image, ["alice"]) == [
        {"user": "alice", "error_code": 0, "error_message": None, "credential_infos": [
            {"mechanism": SHA256, "iterations": 4096},
            {"mechanism": SHA512, "iterations": 8192}]}]
    deleted = ctl.alter_user_scram_credentials([{"name": "alice", "mechanism": SHA256}], [])
    assert codes_of(deleted.value) == {"alice": 0}
    described = describe_user_scram_credentials(ctl.image, None)
    assert describe_user_scram_credentials(ctl.image, []) == described
    assert [(r["user"], [c["mechanism"] for c in r["credential_infos"]]) for r in described] == [
        ("alice", [SHA512]), ("bob", [SHA256])]
    unknown, duplicate = describe_user_scram_credentials(ctl.image, ["nobody", "bob", "bob"])[0:2]
    assert unknown["error_code"] == codes.RESOURCE_NOT_FOUND
    assert duplicate["error_code"] == codes.DUPLICATE_RESOURCE


def test_bootstrap_writes_only_the_missing_credentials() -> None:
    ctl = fresh()
    wanted = {(u, m): scram_credential(m, "pw") for u in ("admin", "pylog-broker")
              for m in (SHA256, SHA512)}
    first = ctl.ensure_scram_credentials(wanted)
    assert sorted(first.value) == sorted(wanted) and len(first.records) == 4
    again = {k: scram_credential(k[1], "other") for k in wanted}
    assert ctl.ensure_scram_credentials(again).records == ()  # idempotent: nothing rewritten
    assert ctl.image.scram_credentials[("admin", SHA256)] == wanted[("admin", SHA256)]


# -- ACLs ------------------------------------------------------------------------------------------


def binding(resource_type=TOPIC, name="orders", pattern=LITERAL, principal="User:alice",
            host="*", operation=READ, permission=ALLOW) -> dict:
    return {"resource_type": resource_type, "resource_name": name, "pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation,
            "permission_type": permission}


def acl_filter(resource_type=ANY, name=None, pattern=ANY, principal=None, host=None,
               operation=ANY, permission=ANY) -> dict:
    return binding(resource_type, name, pattern, principal, host, operation, permission)


def test_create_acls_validates_each_binding_and_never_duplicates_one() -> None:
    ctl = fresh()
    result = ctl.create_acls([
        binding(), binding(),  # the same twice: one ACL
        binding(resource_type=ANY), binding(resource_type=0), binding(pattern=MATCH),
        binding(pattern=ANY), binding(operation=ANY), binding(permission=ANY),
        binding(principal="alice"), binding(name=""), binding(resource_type=CLUSTER),
        binding(resource_type=CLUSTER, name="kafka-cluster", operation=ALL),
        binding(host="not-an-ip"), binding(host="10.0.0.7")])
    assert [r["error_code"] for r in result.value] == [
        0, 0, *[codes.INVALID_REQUEST] * 9, 0, codes.INVALID_REQUEST, 0]
    assert all(r["error_message"] for r in result.value if r["error_code"])
    assert len(ctl.image.acls) == 3
    assert ctl.create_acls([binding()]).records == ()  # already there: nothing written
    assert len({acl.id for acl in ctl.image.acls.values()}) == 3


def test_delete_acls_follows_kafkas_filter_semantics() -> None:
    ctl = fresh()
    ctl.create_acls([
        binding(name="orders"), binding(name="*"), binding(name="ord", pattern=PREFIXED),
        binding(name="payments"), binding(resource_type=GROUP, name="orders"),
        binding(name="orders", principal="User:bob", operation=WRITE, permission=DENY)])

    def matched(f) -> list[tuple]:
        from pylog_nb.broker.controller.security_control import acl_filter_matches
        return sorted((a.resource_type, a.resource_name, a.pattern_type, a.principal)
                      for a in ctl.image.acls.values() if acl_filter_matches(f, a))

    assert len(matched(acl_filter())) == 6  # ANY everything
    assert matched(acl_filter(TOPIC, "orders", LITERAL)) == [
        (TOPIC, "orders", LITERAL, "User:alice"), (TOPIC, "orders", LITERAL, "User:bob")]
    assert matched(acl_filter(TOPIC, "orders", MATCH, principal="User:alice")) == [
        (TOPIC, "*", LITERAL, "User:alice"), (TOPIC, "ord", PREFIXED, "User:alice"),
        (TOPIC, "orders", LITERAL, "User:alice")]  # literal, wildcard and prefix apply
    assert matched(acl_filter(TOPIC, "orders", ANY, operation=WRITE)) == [
        (TOPIC, "orders", LITERAL, "User:bob")]
    assert matched(acl_filter(name="ord", pattern=PREFIXED)) == [(TOPIC, "ord", PREFIXED,
                                                                  "User:alice")]

    result = ctl.delete_acls([acl_filter(TOPIC, "orders", MATCH), acl_filter(TOPIC, "*"),
                              acl_filter(resource_type=0)])
    first, second, bad = result.value
    assert len(first["matching_acls"]) == 4 and len(second["matching_acls"]) == 1
    assert first["matching_acls"][0]["error_code"] == 0
    assert bad["error_code"] == codes.INVALID_REQUEST and bad["matching_acls"] == []
    assert len(result.records) == 4  # the wildcard matched twice, removed once
    assert sorted(a.resource_name for a in ctl.image.acls.values()) == ["orders", "payments"]


# -- client quotas ---------------------------------------------------------------------------------


def entry(entity, *ops) -> dict:
    return {"entity": [list(p) for p in entity], "ops": [
        {"key": k, "value": v, "remove": v is None} if v is not None
        else {"key": k, "value": 0, "remove": True} for k, v in ops]}


def test_alter_client_quotas_sets_and_removes_and_validates_each_entry() -> None:
    ctl = fresh()
    alice = (("user", "alice"),)
    default_user = (("user", None),)
    both = (("user", "alice"), ("client-id", "app"))
    result = ctl.alter_client_quotas([
        entry(alice, ("producer_byte_rate", 1024), ("request_percentage", 12.5)),
        entry(default_user, ("consumer_byte_rate", 2048)),
        entry(both, ("producer_byte_rate", 10)),
        entry((("ip", "1.2.3.4"),), ("producer_byte_rate", 1)),
        entry(alice, ("fetch_rate", 1)),
        entry(alice, ("producer_byte_rate", -1)),
        entry(alice, ("producer_byte_rate", 1), ("producer_byte_rate", 2)),
        entry((("user", "a"), ("user", "b")), ("producer_byte_rate", 1))])
    assert [r["error_code"] for r in result.value] == [0, 0, 0, *[codes.INVALID_REQUEST] * 5]
    assert result.value[0]["entity"] == [["user", "alice"]]
    assert ctl.image.client_quotas[(("user", "alice"),)] == {
        "producer_byte_rate": 1024.0, "request_percentage": 12.5}
    assert ctl.alter_client_quotas([entry(alice, ("producer_byte_rate", 1024))]).records == ()
    removed = ctl.alter_client_quotas([entry(alice, ("producer_byte_rate", None),
                                             ("request_percentage", None))])
    assert len(removed.records) == 2 and alice not in ctl.image.client_quotas
    checked = ctl.alter_client_quotas([entry(alice, ("producer_byte_rate", 5))],
                                      validate_only=True)
    assert checked.value[0]["error_code"] == 0 and checked.records == ()
    assert alice not in ctl.image.client_quotas


def test_describe_client_quotas_matches_exact_default_and_specified_names() -> None:
    ctl = fresh()
    ctl.alter_client_quotas([
        entry((("user", "alice"),), ("producer_byte_rate", 1)),
        entry((("user", None),), ("producer_byte_rate", 2)),
        entry((("user", "alice"), ("client-id", "app")), ("producer_byte_rate", 3))])

    def values(components, strict=False) -> list:
        return [e["values"]["producer_byte_rate"]
                for e in describe_client_quotas(ctl.image, components, strict)]

    def component(match_type, match=None, entity_type="user") -> dict:
        return {"entity_type": entity_type, "match_type": match_type, "match": match}

    assert sorted(values([component(0, "alice")])) == [1.0, 3.0]
    assert values([component(0, "alice")], strict=True) == [1.0]
    assert values([component(1)]) == [2.0]
    assert sorted(values([component(2)])) == [1.0, 3.0]
    assert values([component(2), component(0, "app", "client-id")]) == [3.0]
    assert sorted(values([])) == [1.0, 2.0, 3.0]
    for bad in ([component(0)], [component(1, "x")], [component(3)],
                [component(2), component(2)], [component(2, entity_type="ip")]):
        with pytest.raises(codes.ControllerError) as refused:
            describe_client_quotas(ctl.image, bad, False)
        assert refused.value.error_code == codes.INVALID_REQUEST


# -- a real snapshot -------------------------------------------------------------------------------


def open_quorum(directory: Path, **options) -> QuorumController:
    node = RaftNode(1, frozenset({1}), RaftLog.open(directory, fsync=False),
                    QuorumStateStore(directory, fsync=False), 0, rng=random.Random(0))
    quorum = QuorumController(node, 0, **options)
    quorum.poll(0)
    assert quorum.active is not None
    return quorum


def test_security_metadata_survives_a_snapshot_and_a_restart(tmp_path) -> None:
    quorum = open_quorum(tmp_path, snapshot_records_max=2)
    ctl = quorum.controller()
    decisions = [
        lambda: ctl.alter_user_scram_credentials([], [upsertion(), upsertion("bob", SHA512)]),
        lambda: ctl.create_acls([binding(), binding(name="ord", pattern=PREFIXED)]),
        lambda: ctl.alter_client_quotas([entry((("user", None),), ("consumer_byte_rate", 10))]),
        lambda: ctl.create_acls([binding(resource_type=GROUP)]),
        lambda: ctl.alter_client_quotas([entry((("client-id", "x"),),
                                               ("request_percentage", 5))]),
        *[lambda n=n: ctl.alter_client_quotas([entry((("client-id", "y"),),
                                                     ("request_percentage", n))])
          for n in range(1, 5)],
    ]
    for decide in decisions:
        assert decide().ok
        quorum.take_sends()  # a quorum of one commits at once, and snapshots as it goes
    image = quorum.image
    snapshot = quorum.node.log.snapshot
    assert snapshot is not None  # the log before it is gone
    kinds = {record_from_json(raw).to_dict()["type"] for raw in snapshot.records}
    assert {"UserScramCredential", "AccessControlEntry", "ClientQuota"} <= kinds
    quorum.node.log.close()
    again = open_quorum(tmp_path, snapshot_records_max=2)
    assert again.image == image
    assert len(image.scram_credentials) == 2 and len(image.acls) == 3
    assert len(image.client_quotas) == 3
    again.node.log.close()
