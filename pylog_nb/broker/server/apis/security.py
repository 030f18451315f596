"""The security admin APIs: CreateAcls, DescribeAcls, DeleteAcls, DescribeUserScramCredentials,
AlterUserScramCredentials, DescribeClientQuotas and AlterClientQuotas (issue 23).

Writes go to the active controller (``ControllerAdmin``), which answers once this broker has
applied what they wrote, so the caller's next request already sees them. DescribeAcls answers from
this broker's image, as Kafka's brokers answer from their authorizer. Each handler first checks
the caller as Kafka does (ALTER / DESCRIBE on the cluster for ACLs and SCRAM users,
ALTER_CONFIGS / DESCRIBE_CONFIGS for quotas); the ACL APIs answer SECURITY_DISABLED on a broker
without an authorizer, as Kafka's do. A malformed item (an unknown code, a bad principal, host
or mechanism) gets its own error code and message; the other items go on.
"""

from __future__ import annotations

import base64
from typing import Any

from ... import errors
from ...errors import Errors
from ...protocol.codec import Request
from ...security import acls
from ...security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from ..authorization import Op, caller
from ..controller_admin import AdminError
from ..node import BrokerNode

SCRAM_MECHANISM_CODES = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}  # Kafka's ScramMechanism types
SCRAM_MECHANISM_NAMES = {name: code for code, name in SCRAM_MECHANISM_CODES.items()}
NO_AUTHORIZER = "No Authorizer is configured on the broker"
CLUSTER_REFUSED = "Cluster authorization failed."


def _refusal(node: BrokerNode, operation: int, acl_api: bool = False
             ) -> tuple[int, str] | None:
    """Why the caller may not use the API, or None."""
    if acl_api and node.core.authorizer is None:
        return Errors.SECURITY_DISABLED, NO_AUTHORIZER
    if not caller(node).may_cluster(operation):
        return Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED
    return None


def _admin_failure(error: AdminError) -> tuple[int, str]:
    return errors.error_code_of(error), str(error)


# == ACLs =========================================================================================


async def handle_create_acls(node: BrokerNode, request: Request) -> dict:
    creations = request.body.creations
    refused = _refusal(node, Op.ALTER, acl_api=True)
    if refused is not None:
        return {"results": [_error(*refused) for _ in creations]}
    bindings = [acls.binding_from_creation(c) for c in creations]
    results: list[dict | None] = [
        None if (why := acls.validate_binding(b)) is None else acls.creation_result(why)
        for b in bindings]
    wanted = [_binding_wire(b) for b, r in zip(bindings, results, strict=True) if r is None]
    if wanted:
        try:
            answers = iter(await node.topic_admin().create_acls(wanted))
        except AdminError as error:
            answers = iter([_error(*_admin_failure(error))] * len(wanted))
        results = [r if r is not None else _answer(next(answers)) for r in results]
    return {"results": results}


def _error(code: int, message: str | None) -> dict:
    return {"error_code": code, "error_message": message}


def _answer(result: dict) -> dict:
    return _error(result["error_code"], result["error_message"] or None)


def _binding_wire(binding: acls.AclBinding) -> dict:
    return {"resource_type": int(binding.resource_type), "resource_name": binding.resource_name,
            "pattern_type": int(binding.pattern_type), "principal": binding.principal,
            "host": binding.host, "operation": int(binding.operation),
            "permission_type": int(binding.permission_type)}


def handle_describe_acls(node: BrokerNode, request: Request) -> dict:
    refused = _refusal(node, Op.DESCRIBE, acl_api=True)
    if refused is not None:
        return {"error_code": refused[0], "error_message": refused[1], "resources": []}
    acl_filter = acls.filter_from_wire(request.body)
    why = acls.validate_filter(acl_filter)
    if why is not None:
        return acls.describe_result((), why)
    return acls.describe_result(acl for acl in node.image.acls.values()
                                if acl_filter.matches(acl))


async def handle_delete_acls(node: BrokerNode, request: Request) -> dict:
    filters = [acls.filter_from_wire(f) for f in request.body.filters]
    refused = _refusal(node, Op.ALTER, acl_api=True)
    if refused is not None:
        return {"filter_results": [{**_error(*refused), "matching_acls": []} for _ in filters]}
    results: list[dict | None] = [
        None if (why := acls.validate_filter(f)) is None else acls.filter_result((), why)
        for f in filters]
    wanted = [_filter_wire(f) for f, r in zip(filters, results, strict=True) if r is None]
    if wanted:
        try:
            answers = iter(await node.topic_admin().delete_acls(wanted))
        except AdminError as error:
            answers = iter([{**_error(*_admin_failure(error)), "matching_acls": []}]
                           * len(wanted))
        results = [r if r is not None else next(answers) for r in results]
    return {"filter_results": results}


def _filter_wire(acl_filter: acls.AclBindingFilter) -> dict:
    return {"resource_type": int(acl_filter.resource_type),
            "resource_name": acl_filter.resource_name,
            "pattern_type": int(acl_filter.pattern_type), "principal": acl_filter.principal,
            "host": acl_filter.host, "operation": int(acl_filter.operation),
            "permission_type": int(acl_filter.permission_type)}


# == SCRAM users ==================================================================================


async def handle_describe_user_scram_credentials(node: BrokerNode, request: Request) -> dict:
    refused = _refusal(node, Op.DESCRIBE)
    if refused is not None:
        return {"error_code": refused[0], "error_message": refused[1], "results": []}
    users = request.body.users
    try:
        results = await node.topic_admin().describe_user_scram_credentials(
            None if users is None else [u.name for u in users])
    except AdminError as error:
        code, message = _admin_failure(error)
        return {"error_code": code, "error_message": message, "results": []}
    return {"error_code": errors.NONE, "error_message": None, "results": [
        {**r, "error_message": r["error_message"] or None, "credential_infos": [
            {"mechanism": SCRAM_MECHANISM_NAMES[i["mechanism"]], "iterations": i["iterations"]}
            for i in r["credential_infos"] if i["mechanism"] in SCRAM_MECHANISM_NAMES]}
        for r in results]}


async def handle_alter_user_scram_credentials(node: BrokerNode, request: Request) -> dict:
    body = request.body
    names = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    refused = _refusal(node, Op.ALTER)
    if refused is not None:
        return {"results": [{"user": n, **_error(*refused)} for n in dict.fromkeys(names)]}
    bad: dict[str, dict] = {}
    for item in (*body.deletions, *body.upsertions):
        if item.mechanism not in SCRAM_MECHANISM_CODES:
            bad[item.name] = {"user": item.name,
                              **_error(Errors.UNSUPPORTED_SASL_MECHANISM,
                                       f"Unknown SCRAM mechanism {item.mechanism}")}
        elif not item.name:
            bad[item.name] = {"user": item.name, **_error(
                Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")}
    deletions = [{"name": d.name, "mechanism": SCRAM_MECHANISM_CODES[d.mechanism]}
                 for d in body.deletions if d.name not in bad]
    upsertions = [{"name": u.name, "mechanism": SCRAM_MECHANISM_CODES[u.mechanism],
                   "iterations": u.iterations, "salt": _b64(u.salt),
                   "salted_password": _b64(u.salted_password)}
                  for u in body.upsertions if u.name not in bad]
    answered: dict[str, dict] = {}
    if deletions or upsertions:
        try:
            for r in await node.topic_admin().alter_user_scram_credentials(deletions,
                                                                           upsertions):
                answered[r["user"]] = {**r, "error_message": r["error_message"] or None}
        except AdminError as error:
            failure = _error(*_admin_failure(error))
            answered = {n: {"user": n, **failure} for n in names if n not in bad}
    return {"results": [bad.get(n) or answered[n] for n in dict.fromkeys(names)]}


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


# == client quotas ================================================================================


async def handle_describe_client_quotas(node: BrokerNode, request: Request) -> dict:
    refused = _refusal(node, Op.DESCRIBE_CONFIGS)
    if refused is not None:
        return {"error_code": refused[0], "error_message": refused[1], "entries": None}
    body = request.body
    components = [{"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
                  for c in body.components]
    try:
        entries = await node.topic_admin().describe_client_quotas(components, body.strict)
    except AdminError as error:
        code, message = _admin_failure(error)
        return {"error_code": code, "error_message": message, "entries": None}
    return {"error_code": errors.NONE, "error_message": None, "entries": [
        {"entity": _entity_wire(e["entity"]),
         "values": [{"key": k, "value": float(v)} for k, v in e["values"].items()]}
        for e in entries]}


async def handle_alter_client_quotas(node: BrokerNode, request: Request) -> dict:
    body = request.body
    refused = _refusal(node, Op.ALTER_CONFIGS)
    if refused is not None:
        return {"entries": [{"entity": _entity_wire(_entity(e)), **_error(*refused)}
                            for e in body.entries]}
    entries: list[dict[str, Any]] = [{"entity": _entity(e),
                "ops": [{"key": o.key, "value": float(o.value), "remove": o.remove}
                        for o in e.ops]}
               for e in body.entries]
    try:
        results = await node.topic_admin().alter_client_quotas(entries, body.validate_only)
    except AdminError as error:
        failure = _error(*_admin_failure(error))
        return {"entries": [{"entity": _entity_wire(e["entity"]), **failure} for e in entries]}
    return {"entries": [{"entity": _entity_wire(r["entity"]), "error_code": r["error_code"],
                         "error_message": r["error_message"] or None} for r in results]}


def _entity(entry: Any) -> list[list[str | None]]:
    return [[d.entity_type, d.entity_name] for d in entry.entity]


def _entity_wire(entity: list) -> list[dict]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in entity]
