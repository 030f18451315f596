"""Who may do what: the glue between request handlers and the core's ``Authorizer``.

Theory of operation (Kafka's ``AuthHelper``). A handler asks ``caller(core)`` once, before its
first ``await`` (the connection's principal and address live in context variables that only
its first step is sure to see), and then asks the ``Caller``: ``may(operation, resource type,
name)``, ``may_any`` (KIP-679), ``operations`` (the authorized-operations bit field), ``allowed``
(the names of a list it may act on). Without an authorizer (``--authorizer`` not given: the
core's ``authorizer`` is None) every answer is yes, as Kafka without ``authorizer.class.name``.

Checks that refuse a request whole, with one error code, are a table (``GUARDS``, by API key):
``guarded`` wraps a handler so that the check runs first and a refusal is answered without the
handler running. Checks per topic, partition or group live in the handlers, which answer each
refused item with its own error (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import Errors
from ..protocol import versions as v
from ..security.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..security.authorizer import SUPPORTED_OPERATIONS, Authorizer
from .authentication import PRINCIPAL
from .node import CLIENT_HOST

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's Integer.MIN_VALUE: the client did not ask


@dataclass(frozen=True, slots=True)
class Caller:
    """The principal and client address of one request, and the broker's authorizer."""

    principal: str
    host: str  # the client's IP address (no leading "/")
    authorizer: Authorizer | None  # None: everything is allowed

    def may(self, operation: int, resource_type: int, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type,
                                         name)

    def may_cluster(self, operation: int) -> bool:
        return self.may(operation, CLUSTER, CLUSTER_NAME)

    def may_any(self, operation: int, resource_type: int) -> bool:
        """KIP-679: may the caller do ``operation`` on some resource of the type?"""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_any(self.principal, self.host, operation,
                                             resource_type)

    def allowed(self, operation: int, resource_type: int, names: Iterable[str]) -> set[str]:
        """The names among ``names`` the caller may do ``operation`` on."""
        return {name for name in set(names) if self.may(operation, resource_type, name)}

    def operations(self, resource_type: int, name: str, requested: bool = True) -> int:
        """The authorized-operations field of a Describe* response (Kafka's MIN_VALUE when
        the client did not ask)."""
        if not requested:
            return AUTHORIZED_OPERATIONS_OMITTED
        if self.authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType(resource_type)])
        return self.authorizer.authorized_operations(self.principal, self.host, resource_type,
                                                     name)

    def may_produce_idempotently(self) -> bool:
        """Kafka's InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster,
        or (KIP-679) WRITE on some topic."""
        return self.may_cluster(Op.IDEMPOTENT_WRITE) or self.may_any(Op.WRITE, TOPIC)


class AuthorizerNotReady(ConnectionError):
    """The broker has not loaded the ACLs yet (it is catching up with the metadata after a
    start): a client that is not a super user is not served; its connection is closed, and it
    retries, as with a broker that is not listening yet. Never an authorization error, which a
    client would take as final."""


def caller(core: Any) -> Caller:
    """The caller of the request being handled (``core``: a BrokerCore, or a node having one).
    Call it before the handler's first ``await``. Raises AuthorizerNotReady before the core
    has its first image, for anyone but a super user."""
    core = getattr(core, "core", core)
    authorizer = getattr(core, "authorizer", None)
    principal = PRINCIPAL.get()
    if (authorizer is not None and not getattr(core, "authorizer_ready", True)
            and principal not in authorizer.super_users):
        raise AuthorizerNotReady(f"{principal}: the ACLs are not loaded yet")
    return Caller(principal, CLIENT_HOST.get().lstrip("/"), authorizer)


# == whole-request refusals =======================================================================

Check = Callable[[Caller, Any], int | None]  # the refusal's error code, None: allowed
Refusal = Callable[[Any, int], dict]  # (request body, error code) -> the response


def _error_only(_body: Any, code: int) -> dict:
    return {"error_code": code}


def _error_message(_body: Any, code: int) -> dict:
    return {"error_code": code, "error_message": "Group authorization failed."}


def _no_producer(_body: Any, code: int) -> dict:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


def _group(operation: Op, field: str = "group_id") -> Check:
    def check(who: Caller, body: Any) -> int | None:
        if who.may(operation, GROUP, getattr(body, field) or ""):
            return None
        return Errors.GROUP_AUTHORIZATION_FAILED
    return check


def _transactional(who: Caller, body: Any) -> int | None:
    if who.may(Op.WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return None
    return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _init_producer_id(who: Caller, body: Any) -> int | None:
    if body.transactional_id is not None:
        return _transactional(who, body)
    return None if who.may_produce_idempotently() else Errors.CLUSTER_AUTHORIZATION_FAILED


def _add_offsets_to_txn(who: Caller, body: Any) -> int | None:
    return _transactional(who, body) or _group(Op.READ)(who, body)


def _subscribing(who: Caller, body: Any) -> int | None:
    """ConsumerGroupHeartbeat / ShareGroupHeartbeat: READ the group, DESCRIBE every topic
    subscribed to by name."""
    refused = _group(Op.READ)(who, body)
    if refused is not None:
        return refused
    names = getattr(body, "subscribed_topic_names", None) or ()
    if len(who.allowed(Op.DESCRIBE, TOPIC, names)) < len(set(names)):
        return Errors.TOPIC_AUTHORIZATION_FAILED
    return None


def _cluster_action(who: Caller, _body: Any) -> int | None:
    return None if who.may_cluster(Op.CLUSTER_ACTION) else Errors.CLUSTER_AUTHORIZATION_FAILED


def _refused_markers(body: Any, code: int) -> dict:
    return {"markers": [
        {"producer_id": marker.producer_id, "topics": [
            {"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": code}
                for index in topic.partition_indexes]}
            for topic in marker.topics]}
        for marker in body.markers]}


def _refused_share_state(body: Any, code: int) -> dict:
    return {"results": [
        {"topic_id": topic.topic_id, "partitions": [
            {"partition": data.partition, "error_code": code,
             "error_message": "Cluster authorization failed"}
            for data in topic.partitions]}
        for topic in body.topics]}


@dataclass(frozen=True, slots=True)
class Guard:
    check: Check
    refusal: Refusal = _error_only


GUARDS: dict[int, Guard] = {
    v.JOIN_GROUP_KEY: Guard(_group(Op.READ)),
    v.SYNC_GROUP_KEY: Guard(_group(Op.READ)),
    v.HEARTBEAT_KEY: Guard(_group(Op.READ)),
    v.LEAVE_GROUP_KEY: Guard(_group(Op.READ)),
    v.INIT_PRODUCER_ID_KEY: Guard(_init_producer_id, _no_producer),
    v.ADD_OFFSETS_TO_TXN_KEY: Guard(_add_offsets_to_txn),
    v.END_TXN_KEY: Guard(_transactional),
    v.SHARE_FETCH_KEY: Guard(_group(Op.READ)),
    v.SHARE_ACKNOWLEDGE_KEY: Guard(_group(Op.READ)),
    v.ALTER_SHARE_GROUP_OFFSETS_KEY: Guard(_group(Op.READ), _error_message),
    v.DELETE_SHARE_GROUP_OFFSETS_KEY: Guard(_group(Op.DELETE), _error_message),
    v.CONSUMER_GROUP_HEARTBEAT_KEY: Guard(_subscribing),
    v.SHARE_GROUP_HEARTBEAT_KEY: Guard(_subscribing),
    v.WRITE_TXN_MARKERS_KEY: Guard(_cluster_action, _refused_markers),
    **{key: Guard(_cluster_action, _refused_share_state) for key in (
        v.INITIALIZE_SHARE_GROUP_STATE_KEY, v.READ_SHARE_GROUP_STATE_KEY,
        v.WRITE_SHARE_GROUP_STATE_KEY, v.DELETE_SHARE_GROUP_STATE_KEY,
        v.READ_SHARE_GROUP_STATE_SUMMARY_KEY)},
}

H = Callable[[Any, Any], Any]


def guarded(api_key: int, handler: H) -> H:
    """``handler``, preceded by the API's whole-request check when ``GUARDS`` has one."""
    guard = GUARDS.get(api_key)
    if guard is None:
        return handler

    def check_first(core: Any, request: Any) -> Any:
        refused = guard.check(caller(core), request.body)
        if refused is not None:
            return guard.refusal(request.body, refused)
        return handler(core, request)

    check_first.__name__ = getattr(handler, "__name__", "handler")
    return check_first


def guard_all(handlers: dict[int, H]) -> dict[int, H]:
    return {key: guarded(key, handler) for key, handler in handlers.items()}
