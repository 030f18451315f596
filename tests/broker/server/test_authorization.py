"""The glue between request handlers and the authorizer (server/authorization.py), and the core
keeping its authorizer in step with the image's ACLs; no sockets."""

from __future__ import annotations

import contextvars
from dataclasses import replace
from types import MappingProxyType, SimpleNamespace

from support.recording_shell import RecordingShell

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.metadata.image import ClusterImage
from pylog_nb.broker.metadata.records import AccessControlEntry
from pylog_nb.broker.protocol import versions as v
from pylog_nb.broker.security.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from pylog_nb.broker.security.authorizer import SUPPORTED_OPERATIONS, Authorizer
from pylog_nb.broker.server.apis import CORE_HANDLERS, SHELL_HANDLERS
from pylog_nb.broker.server.authentication import PRINCIPAL
from pylog_nb.broker.server.authorization import Caller, caller, guarded
from pylog_nb.broker.server.config import BrokerConfig
from pylog_nb.broker.server.core import BrokerCore
from pylog_nb.broker.server.node import CLIENT_HOST

ALICE = "User:alice"
Op, RT = AclOperation, ResourceType


def entry(acl_id: str, resource_type: RT, name: str, operation: Op, *,
          pattern: PatternType = PatternType.LITERAL, principal: str = ALICE,
          host: str = "*", permission: AclPermissionType = AclPermissionType.ALLOW
          ) -> AccessControlEntry:
    return AccessControlEntry(id=acl_id, resource_type=int(resource_type), resource_name=name,
                              pattern_type=int(pattern), principal=principal, host=host,
                              operation=int(operation), permission_type=int(permission))


def alice(*acls: AccessControlEntry, host: str = "127.0.0.1") -> Caller:
    return Caller(ALICE, host, Authorizer(acls, super_users=("User:admin",)))


def request(**body) -> SimpleNamespace:
    return SimpleNamespace(body=SimpleNamespace(**body))


# == Caller =====================================================================================


def test_without_an_authorizer_everything_is_allowed():
    anyone = Caller("User:ANONYMOUS", "10.0.0.1", None)
    assert anyone.may(Op.WRITE, RT.TOPIC, "t") and anyone.may_cluster(Op.ALTER)
    assert anyone.may_any(Op.WRITE, RT.TRANSACTIONAL_ID)
    assert anyone.allowed(Op.READ, RT.GROUP, ["a", "b"]) == {"a", "b"}
    assert anyone.operations(RT.TOPIC, "t") == sum(
        1 << op for op in SUPPORTED_OPERATIONS[RT.TOPIC])
    assert anyone.operations(RT.TOPIC, "t", requested=False) == -(2**31)


def test_a_caller_is_checked_against_the_acls_by_principal_and_host():
    who = alice(entry("1", RT.TOPIC, "orders-", Op.WRITE, pattern=PatternType.PREFIXED),
                entry("2", RT.GROUP, "g", Op.READ, host="10.0.0.9"))
    assert who.may(Op.WRITE, RT.TOPIC, "orders-eu") and not who.may(Op.WRITE, RT.TOPIC, "x")
    assert who.may(Op.DESCRIBE, RT.TOPIC, "orders-eu")  # WRITE implies DESCRIBE
    assert not who.may(Op.READ, RT.GROUP, "g")  # granted from another host only
    assert who.allowed(Op.WRITE, RT.TOPIC, ["orders-1", "other"]) == {"orders-1"}
    assert who.operations(RT.TOPIC, "orders-1") == (1 << Op.WRITE) | (1 << Op.DESCRIBE)
    assert who.may_produce_idempotently()  # KIP-679: WRITE on some topic
    assert not alice().may_produce_idempotently()


def test_caller_reads_the_connection_context_and_strips_the_slash():
    core = SimpleNamespace(authorizer=Authorizer([entry("1", RT.TOPIC, "t", Op.READ,
                                                        host="10.1.2.3")]))

    def in_connection() -> Caller:
        PRINCIPAL.set(ALICE)
        CLIENT_HOST.set("/10.1.2.3")
        return caller(SimpleNamespace(core=core))  # a node: its core's authorizer

    who = contextvars.copy_context().run(in_connection)
    assert (who.principal, who.host) == (ALICE, "10.1.2.3")
    assert who.may(Op.READ, RT.TOPIC, "t")


# == whole-request guards ========================================================================


def guarded_call(api_key: int, who_acls: tuple, **body):
    """Run ``api_key``'s guard around a handler that records it ran, as alice."""
    ran: list = []
    core = SimpleNamespace(authorizer=Authorizer(who_acls, super_users=()))

    def in_connection():
        PRINCIPAL.set(ALICE)
        CLIENT_HOST.set("/127.0.0.1")
        handler = guarded(api_key, lambda _core, _request: ran.append(True) or {"ok": True})
        return handler(core, request(**body))

    return contextvars.copy_context().run(in_connection), ran


def test_join_group_is_refused_before_its_handler_runs():
    answer, ran = guarded_call(v.JOIN_GROUP_KEY, (), group_id="g")
    assert answer == {"error_code": Errors.GROUP_AUTHORIZATION_FAILED} and not ran
    answer, ran = guarded_call(v.JOIN_GROUP_KEY, (entry("1", RT.GROUP, "g", Op.READ),),
                               group_id="g")
    assert answer == {"ok": True} and ran


def test_init_producer_id_needs_the_transactional_id_or_idempotent_write():
    answer, _ = guarded_call(v.INIT_PRODUCER_ID_KEY, (), transactional_id="tx")
    assert answer["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer, _ = guarded_call(v.INIT_PRODUCER_ID_KEY, (), transactional_id=None)
    assert answer == {"error_code": Errors.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                      "producer_epoch": -1}
    grant = entry("1", RT.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)
    answer, ran = guarded_call(v.INIT_PRODUCER_ID_KEY, (grant,), transactional_id=None)
    assert ran


def test_add_offsets_to_txn_needs_the_transactional_id_then_the_group():
    txn = entry("1", RT.TRANSACTIONAL_ID, "tx", Op.WRITE)
    answer, _ = guarded_call(v.ADD_OFFSETS_TO_TXN_KEY, (), transactional_id="tx", group_id="g")
    assert answer["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer, _ = guarded_call(v.ADD_OFFSETS_TO_TXN_KEY, (txn,), transactional_id="tx",
                             group_id="g")
    assert answer["error_code"] == Errors.GROUP_AUTHORIZATION_FAILED


def test_consumer_group_heartbeat_needs_describe_on_every_subscribed_topic():
    group = entry("1", RT.GROUP, "g", Op.READ)
    answer, _ = guarded_call(v.CONSUMER_GROUP_HEARTBEAT_KEY, (group,), group_id="g",
                             subscribed_topic_names=("a", "b"))
    assert answer["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
    topics = entry("2", RT.TOPIC, "*", Op.DESCRIBE)
    _, ran = guarded_call(v.CONSUMER_GROUP_HEARTBEAT_KEY, (group, topics), group_id="g",
                          subscribed_topic_names=("a", "b"))
    assert ran


def test_inter_broker_apis_need_cluster_action():
    markers = [SimpleNamespace(producer_id=7, topics=[
        SimpleNamespace(name="t", partition_indexes=[0, 1])])]
    answer, ran = guarded_call(v.WRITE_TXN_MARKERS_KEY, (), markers=markers)
    assert not ran
    assert answer == {"markers": [{"producer_id": 7, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED},
        {"partition_index": 1, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED}]}]}]}


def test_every_handler_of_both_tables_is_served_through_its_guard():
    for key in (v.JOIN_GROUP_KEY, v.END_TXN_KEY, v.WRITE_TXN_MARKERS_KEY):
        assert CORE_HANDLERS[key].__name__.startswith("handle_")
    assert {v.CREATE_ACLS_KEY, v.DESCRIBE_ACLS_KEY, v.DELETE_ACLS_KEY,
            v.ALTER_USER_SCRAM_CREDENTIALS_KEY, v.DESCRIBE_USER_SCRAM_CREDENTIALS_KEY,
            v.ALTER_CLIENT_QUOTAS_KEY, v.DESCRIBE_CLIENT_QUOTAS_KEY} <= set(SHELL_HANDLERS)


# == the core follows the image ===================================================================


def with_acls(image: ClusterImage, *acls: AccessControlEntry) -> ClusterImage:
    return replace(image, acls=MappingProxyType({acl.id: acl for acl in acls}))


def test_the_core_keeps_its_authorizer_in_step_with_the_published_acls(tmp_path):
    config = BrokerConfig(1, tmp_path, authorizer_enabled=True, super_users=("User:admin",))
    core = BrokerCore(1, tmp_path, RecordingShell(), now_ms=lambda: 0, incarnation_id="i",
                      config=config)
    assert core.authorizer is not None and len(core.authorizer) == 0
    read, write = entry("r", RT.TOPIC, "t", Op.READ), entry("w", RT.TOPIC, "t", Op.WRITE)
    core.publish(with_acls(core.image, read))
    assert core.authorizer.authorize(ALICE, "1.2.3.4", Op.READ, RT.TOPIC, "t")
    core.publish(with_acls(core.image, write))  # read removed, write added
    assert not core.authorizer.authorize(ALICE, "1.2.3.4", Op.READ, RT.TOPIC, "t")
    assert core.authorizer.authorize(ALICE, "1.2.3.4", Op.WRITE, RT.TOPIC, "t")
    assert core.authorizer.authorize("User:admin", "1.2.3.4", Op.ALTER, RT.CLUSTER,
                                     "kafka-cluster")
    core.close()


def test_without_the_flag_the_core_has_no_authorizer(tmp_path):
    core = BrokerCore(1, tmp_path, RecordingShell(), now_ms=lambda: 0, incarnation_id="i")
    assert core.authorizer is None
    core.publish(with_acls(core.image, entry("r", RT.TOPIC, "t", Op.READ)))
    assert caller(core).may(Op.DELETE, RT.TOPIC, "t")
    core.close()


def test_a_group_describe_hides_a_group_using_a_topic_the_caller_may_not_describe():
    from pylog_nb.broker.server.apis.consumer_groups import authorized_description

    described = {"group_id": "g", "error_code": 0, "members": [
        {"subscribed_topic_names": ["mine"], "assignment": {"topic_partitions": [
            {"topic_name": "theirs", "partitions": [0]}]}}]}
    who = alice(entry("1", RT.TOPIC, "mine", Op.READ), entry("2", RT.GROUP, "g", Op.DESCRIBE))
    refused = authorized_description(who, described, include_operations=True)
    assert refused["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED and not refused["members"]
    everything = alice(entry("1", RT.TOPIC, "*", Op.DESCRIBE),
                       entry("2", RT.GROUP, "g", Op.DESCRIBE))
    shown = authorized_description(everything, described, include_operations=True)
    assert shown["members"] and shown["authorized_operations"] == 1 << Op.DESCRIBE
