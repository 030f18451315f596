"""The controller's decisions on security metadata (issue 23): SCRAM credentials, ACL bindings
and client quotas, and the describes answered from the same image.

Theory of operation: as in Kafka's AlterUserScramCredentials, CreateAcls, DeleteAcls and
AlterClientQuotas, a request carries several items and each item gets its own result (an error
code and a one-line message, NONE when done); one refused item does not refuse the others. The
records of the items that pass form one batch (the Controller appends it atomically), each
checked against the image *and* the items before it in the same request. A plan never raises
for an item; only a describe whose filter is malformed is refused whole (ControllerError).

- SCRAM: the client sends the salt and the salted password (Hi(password, salt, iterations),
  computed on its side), never the password; the controller keeps only the stored key
  H(HMAC(salted, "Client Key")) and the server key HMAC(salted, "Server Key") (RFC 5802). A
  user named twice in one request is refused (DUPLICATE_RESOURCE) in every place it appears.
- ACLs: a creation identical to an existing binding (or to an earlier one of the request) adds
  nothing and succeeds (Kafka's StandardAuthorizer). A deletion filter removes every binding it
  matches (Kafka's AclBindingFilter: ANY matches any value, null any name, MATCH the literal,
  wildcard and prefixed bindings that apply to the name); a binding matched by two filters is
  listed under both and removed once.
- Quotas: an operation that changes nothing (the same value, removing what is absent) writes
  nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..metadata.image import ClusterImage
from ..metadata.records import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSION_TYPES,
    ACL_RESOURCE_TYPES,
    PATTERN_LITERAL,
    PATTERN_PREFIXED,
    QUOTA_ENTITY_TYPES,
    RESOURCE_CLUSTER,
    AccessControlEntry,
    ClientQuota,
    MetadataRecord,
    MetadataRecordError,
    QuotaEntity,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
    b64encode,
    is_principal,
    quota_entity,
    quota_value,
)
from ..security.sasl import (
    SCRAM_ITERATIONS_MAX,
    SCRAM_ITERATIONS_MIN,
    SCRAM_MECHANISMS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
)
from . import errors
from .errors import ControllerError

__all__ = [
    "CLUSTER_RESOURCE_NAME",
    "WILDCARD",
    "acl_filter_matches",
    "describe_client_quotas",
    "describe_user_scram_credentials",
    "plan_alter_client_quotas",
    "plan_alter_user_scram_credentials",
    "plan_create_acls",
    "plan_delete_acls",
    "plan_missing_scram_credentials",
    "scram_keys",
]

CLUSTER_RESOURCE_NAME = "kafka-cluster"  # Kafka's only name for the CLUSTER resource
WILDCARD = "*"  # a LITERAL binding of this name applies to every name; a host "*" to every host
# Filter codes (Kafka's ResourceType, PatternType, AclOperation, AclPermissionType: ANY = 1)
FILTER_ANY = 1
PATTERN_MATCH = 2
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# describe_client_quotas match types (Kafka's ClientQuotaFilterComponent)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
DUPLICATE_USER = "A user credential cannot be altered twice in the same request"

Result = dict[str, Any]

ACL_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/pylog-nb/acl")
PLACEHOLDER_ACL_ID = str(uuid.UUID(int=0))  # while a creation is checked, before its id


def _result(code: int = errors.NONE, message: str = "", **fields: Any) -> Result:
    return {**fields, "error_code": code, "error_message": message or None}


# -- SCRAM credentials ---------------------------------------------------------------------------


def scram_keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """(stored key, server key) of a salted password (RFC 5802)."""
    digest = SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return hashlib.new(digest, client_key).digest(), server_key


def _b64(value: Any) -> bytes | None:
    try:
        return base64.b64decode(value, validate=True) if isinstance(value, str) else None
    except (binascii.Error, ValueError):
        return None


def _check_mechanism(mechanism: str) -> None:
    if mechanism not in SCRAM_MECHANISMS:
        raise ControllerError(errors.UNSUPPORTED_SASL_MECHANISM,
                              f"Unknown SCRAM mechanism {str(mechanism)[:40]!r}")


def _credential_record(image: ClusterImage, upsertion: Mapping[str, Any]) -> UserScramCredential:
    """The record of one upsertion, or ControllerError saying why not."""
    name, mechanism, iterations = upsertion["name"], upsertion["mechanism"], upsertion["iterations"]
    _check_mechanism(mechanism)
    if not name:
        raise ControllerError(errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if iterations < SCRAM_ITERATIONS_MIN:
        raise ControllerError(errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if iterations > SCRAM_ITERATIONS_MAX:
        raise ControllerError(errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    salt, salted = _b64(upsertion["salt"]), _b64(upsertion["salted_password"])
    digest_size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
    if not salt or salted is None or len(salted) != digest_size:
        raise ControllerError(errors.UNACCEPTABLE_CREDENTIAL,
                              f"salt and salted_password must be base64, the salted password "
                              f"as long as a {mechanism} digest")
    stored_key, server_key = scram_keys(mechanism, salted)
    return UserScramCredential(name=name, mechanism=mechanism, salt=b64encode(salt),
                               stored_key=b64encode(stored_key),
                               server_key=b64encode(server_key), iterations=iterations)


def _removal_record(image: ClusterImage, deletion: Mapping[str, Any]) -> RemoveUserScramCredential:
    name, mechanism = deletion["name"], deletion["mechanism"]
    _check_mechanism(mechanism)
    if not name:
        raise ControllerError(errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if (name, mechanism) not in image.scram_credentials:
        raise ControllerError(errors.RESOURCE_NOT_FOUND,
                              "Attempt to delete a user credential that does not exist")
    return RemoveUserScramCredential(name=name, mechanism=mechanism)


def plan_alter_user_scram_credentials(
    image: ClusterImage, deletions: Sequence[Mapping[str, Any]],
    upsertions: Sequence[Mapping[str, Any]],
) -> tuple[list[MetadataRecord], list[Result]]:
    """Records and per-user results ({user, error_code, error_message}, in request order) of
    AlterUserScramCredentials: deletions {name, mechanism}, upsertions {name, mechanism,
    iterations, salt, salted_password} (base64)."""
    Plan = Callable[[ClusterImage, Mapping[str, Any]], MetadataRecord]
    items: list[tuple[str, Mapping[str, Any], Plan]] = [
        (d["name"], d, _removal_record) for d in deletions]
    items += [(u["name"], u, _credential_record) for u in upsertions]
    counts: dict[str, int] = {}
    for name, _, _ in items:
        counts[name] = counts.get(name, 0) + 1
    records: dict[str, MetadataRecord] = {}
    outcome: dict[str, Result] = {}
    for name, item, plan in items:
        if name in outcome:
            continue
        if counts[name] > 1:
            outcome[name] = _result(errors.DUPLICATE_RESOURCE, DUPLICATE_USER, user=name)
            continue
        try:
            records[name] = plan(image, item)
        except ControllerError as error:
            outcome[name] = _result(error.error_code, str(error), user=name)
        else:
            outcome[name] = _result(user=name)
    return list(records.values()), list(outcome.values())


def plan_missing_scram_credentials(
    image: ClusterImage, credentials: Mapping[tuple[str, str], ScramCredential]
) -> list[MetadataRecord]:
    """Records for the (user, mechanism) credentials of ``credentials`` the image lacks: the
    bootstrap of the cluster's own users (Kafka's ``kafka-storage format --add-scram``)."""
    return [UserScramCredential(name=user, mechanism=mechanism, salt=b64encode(c.salt),
                                stored_key=b64encode(c.stored_key),
                                server_key=b64encode(c.server_key), iterations=c.iterations)
            for (user, mechanism), c in sorted(credentials.items())
            if (user, mechanism) not in image.scram_credentials]


def describe_user_scram_credentials(image: ClusterImage, users: Sequence[str] | None
                                    ) -> list[Result]:
    """Per user {user, error_code, error_message, credential_infos: [{mechanism,
    iterations}]}: every user with a credential (``users`` None or empty, as Kafka's), or
    those named."""
    by_user: dict[str, list[dict[str, Any]]] = {}
    for (user, mechanism), credential in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append(
            {"mechanism": mechanism, "iterations": credential.iterations})
    if not users:
        return [_result(user=u, credential_infos=infos) for u, infos in by_user.items()]
    results = []
    for user in dict.fromkeys(users):
        if users.count(user) > 1:
            message = "Cannot describe SCRAM credentials for the same user twice in a request"
            results.append(_result(errors.DUPLICATE_RESOURCE, message, user=user,
                                   credential_infos=[]))
        elif user not in by_user:
            results.append(_result(errors.RESOURCE_NOT_FOUND,
                                   "Attempt to describe a user credential that does not exist",
                                   user=user, credential_infos=[]))
        else:
            results.append(_result(user=user, credential_infos=by_user[user]))
    return results


# -- ACLs ----------------------------------------------------------------------------------------

BINDING_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host",
                  "operation", "permission_type")


def _invalid(message: str) -> ControllerError:
    return ControllerError(errors.INVALID_REQUEST, message)


def _check_host(host: str) -> None:
    if host == WILDCARD:
        return
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise _invalid(f"Host {host[:60]!r} is neither {WILDCARD!r} nor an IP address") from None


def _new_binding(creation: Mapping[str, Any], acl_id: str) -> AccessControlEntry:
    """The record of one creation, or ControllerError (INVALID_REQUEST) saying why not."""
    if creation["resource_type"] not in ACL_RESOURCE_TYPES:
        raise _invalid(f"Invalid resourceType {creation['resource_type']}")
    if creation["pattern_type"] not in ACL_PATTERN_TYPES:
        raise _invalid(f"Invalid patternType {creation['pattern_type']}")
    if creation["operation"] not in ACL_OPERATIONS:
        raise _invalid(f"Invalid operation {creation['operation']}")
    if creation["permission_type"] not in ACL_PERMISSION_TYPES:
        raise _invalid(f"Invalid permissionType {creation['permission_type']}")
    if not creation["resource_name"]:
        raise _invalid("Resource name should not be empty")
    if (creation["resource_type"] == RESOURCE_CLUSTER
            and creation["resource_name"] != CLUSTER_RESOURCE_NAME):
        raise _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}")
    if not is_principal(creation["principal"]):
        raise _invalid(f"Could not parse principal from {creation['principal'][:60]!r}")
    _check_host(creation["host"])
    try:
        return AccessControlEntry(id=acl_id, **{f: creation[f] for f in BINDING_FIELDS})
    except MetadataRecordError as error:
        raise _invalid(str(error)) from None


def plan_create_acls(image: ClusterImage, creations: Sequence[Mapping[str, Any]]
                     ) -> tuple[list[MetadataRecord], list[Result]]:
    """Records and per-creation results ({error_code, error_message}) of CreateAcls. An ACL's
    id is derived from its binding (``acl_id_of``): the same binding is never stored twice, so
    the id is unique, and deciding draws nothing from the controller's random source."""
    existing = {acl.binding() for acl in image.acls.values()}
    records: list[MetadataRecord] = []
    results = []
    for creation in creations:
        try:
            entry = _new_binding(creation, PLACEHOLDER_ACL_ID)
        except ControllerError as error:
            results.append(_result(error.error_code, str(error)))
            continue
        results.append(_result())
        binding = entry.binding()
        if binding not in existing:
            existing.add(binding)
            records.append(replace(entry, id=acl_id_of(binding)))
    return records, results


def acl_id_of(binding: Any) -> str:
    """A binding's id: a name-based UUID (RFC 4122 version 5) of its fields."""
    return str(uuid.uuid5(ACL_ID_NAMESPACE, repr(binding)))


def _check_filter(f: Mapping[str, Any]) -> None:
    if f["resource_type"] not in (FILTER_ANY, *ACL_RESOURCE_TYPES):
        raise _invalid(f"Invalid resourceType filter {f['resource_type']}")
    if f["pattern_type"] not in (FILTER_ANY, PATTERN_MATCH, *ACL_PATTERN_TYPES):
        raise _invalid(f"Invalid patternType filter {f['pattern_type']}")
    if f["operation"] not in (FILTER_ANY, *ACL_OPERATIONS):
        raise _invalid(f"Invalid operation filter {f['operation']}")
    if f["permission_type"] not in (FILTER_ANY, *ACL_PERMISSION_TYPES):
        raise _invalid(f"Invalid permissionType filter {f['permission_type']}")


def _pattern_matches(f: Mapping[str, Any], acl: AccessControlEntry) -> bool:
    if f["resource_type"] not in (FILTER_ANY, acl.resource_type):
        return False
    if f["pattern_type"] not in (FILTER_ANY, PATTERN_MATCH, acl.pattern_type):
        return False
    name = f["resource_name"]
    if name is None:
        return True
    if f["pattern_type"] != PATTERN_MATCH:
        return name == acl.resource_name
    if acl.pattern_type == PATTERN_LITERAL:
        return name == acl.resource_name or acl.resource_name == WILDCARD
    assert acl.pattern_type == PATTERN_PREFIXED, acl
    return name.startswith(acl.resource_name)


def acl_filter_matches(f: Mapping[str, Any], acl: AccessControlEntry) -> bool:
    """Kafka's AclBindingFilter.matches: the pattern part, then the entry part (null principal
    and host, ANY operation and permission match anything)."""
    return (_pattern_matches(f, acl)
            and f["principal"] in (None, acl.principal)
            and f["host"] in (None, acl.host)
            and f["operation"] in (FILTER_ANY, acl.operation)
            and f["permission_type"] in (FILTER_ANY, acl.permission_type))


def _binding_json(acl: AccessControlEntry) -> Result:
    return _result(**{f: getattr(acl, f) for f in BINDING_FIELDS})


def plan_delete_acls(image: ClusterImage, filters: Sequence[Mapping[str, Any]]
                     ) -> tuple[list[MetadataRecord], list[Result]]:
    """Records and per-filter results ({error_code, error_message, matching_acls: [binding
    with error_code, error_message]}) of DeleteAcls."""
    records: list[MetadataRecord] = []
    removed: set[str] = set()
    results = []
    for f in filters:
        try:
            _check_filter(f)
        except ControllerError as error:
            results.append(_result(error.error_code, str(error), matching_acls=[]))
            continue
        matching = [image.acls[i] for i in sorted(image.acls)
                    if acl_filter_matches(f, image.acls[i])]
        for acl in matching:
            if acl.id not in removed:
                removed.add(acl.id)
                records.append(RemoveAccessControlEntry(id=acl.id))
        results.append(_result(matching_acls=[_binding_json(acl) for acl in matching]))
    return records, results


# -- client quotas -------------------------------------------------------------------------------


def _entry_records(entity: QuotaEntity, current: dict[str, float],
                   ops: Sequence[Mapping[str, Any]]) -> list[ClientQuota]:
    """The records of one entry's operations against the entity's ``current`` quotas (updated
    in place), or ControllerError (INVALID_REQUEST)."""
    keys = [op["key"] for op in ops]
    if len(set(keys)) != len(keys):
        raise _invalid("Duplicate quota key in one entry")
    records = []
    try:
        for op in ops:
            if op["remove"]:
                quota_value(op["key"], 0)  # a known key
                if op["key"] in current:
                    records.append(ClientQuota(entity=entity, key=op["key"], value=0.0,
                                               remove=True))
                continue
            value = quota_value(op["key"], op["value"])
            if current.get(op["key"]) != value:
                records.append(ClientQuota(entity=entity, key=op["key"], value=value,
                                           remove=False))
    except MetadataRecordError as error:
        raise _invalid(str(error)) from None
    for record in records:
        if record.remove:
            del current[record.key]
        else:
            current[record.key] = record.value
    return records


def plan_alter_client_quotas(image: ClusterImage, entries: Sequence[Mapping[str, Any]]
                             ) -> tuple[list[MetadataRecord], list[Result]]:
    """Records and per-entry results ({entity, error_code, error_message}) of
    AlterClientQuotas: entries {entity: [[type, name or null], ...], ops: [{key, value,
    remove}]}."""
    working: dict[QuotaEntity, dict[str, float]] = {}
    records: list[MetadataRecord] = []
    results = []
    for entry in entries:
        try:
            try:
                entity = quota_entity(entry["entity"])
            except MetadataRecordError as error:
                raise _invalid(str(error)) from None
            current = working.setdefault(entity, dict(image.client_quotas.get(entity, {})))
            scratch = dict(current)
            records.extend(_entry_records(entity, scratch, entry["ops"]))
            working[entity] = scratch
        except ControllerError as error:
            results.append(_result(error.error_code, str(error), entity=entry["entity"]))
        else:
            results.append(_result(entity=entry["entity"]))
    return records, results


def _component_matches(component: Mapping[str, Any], names: Mapping[str, str | None]) -> bool:
    kind = component["entity_type"]
    if kind not in names:
        return False
    name = names[kind]
    if component["match_type"] == MATCH_EXACT:
        return name == component["match"]
    if component["match_type"] == MATCH_DEFAULT:
        return name is None
    return name is not None  # MATCH_SPECIFIED: any name but the default


def _check_components(components: Sequence[Mapping[str, Any]]) -> None:
    kinds = [c["entity_type"] for c in components]
    if len(set(kinds)) != len(kinds):
        raise _invalid("Duplicate entity type in the filter")
    for c in components:
        if c["entity_type"] not in QUOTA_ENTITY_TYPES:
            raise _invalid(f"Unknown entity type {str(c['entity_type'])[:40]!r}")
        if c["match_type"] == MATCH_EXACT and c["match"] is None:
            raise _invalid("An exact match needs a name to match")
        if c["match_type"] in (MATCH_DEFAULT, MATCH_SPECIFIED) and c["match"] is not None:
            raise _invalid("Only an exact match takes a name to match")
        if c["match_type"] not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise _invalid(f"Unknown match type {c['match_type']}")


def describe_client_quotas(image: ClusterImage, components: Sequence[Mapping[str, Any]],
                           strict: bool) -> list[Result]:
    """[{entity: [[type, name or null], ...], values: {key: value}}] of every entity every
    component matches (``strict``: and no entity type beyond the components'); ControllerError
    (INVALID_REQUEST) for a malformed filter."""
    _check_components(components)
    kinds = {c["entity_type"] for c in components}
    entries = []
    for entity, values in sorted(image.client_quotas.items(), key=lambda kv: repr(kv[0])):
        names = dict(entity)
        if strict and set(names) != kinds:
            continue
        if all(_component_matches(c, names) for c in components):
            entries.append({"entity": [list(pair) for pair in entity], "values": dict(values)})
    return entries
