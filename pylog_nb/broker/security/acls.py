"""ACLs as Kafka's Admin API speaks them: codes, bindings, filters, and the ACL requests.

Theory of operation: an ACL binds a resource pattern (resource type, name, pattern type) to an
access control entry (principal, host, operation, permission type); every field is one of
Kafka's wire codes (``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``,
the numbers of Kafka's enums of the same names), so an ``AclBinding`` is what CreateAcls
carries, DescribeAcls returns and the metadata log's ``AccessControlEntry`` records (an ACL of
the image is any object with those attribute names and an ``id``: ``AclEntry``).

- A binding is concrete: LITERAL (the name, or ``*`` for every resource of its type) or
  PREFIXED (every name starting with it); ALLOW or DENY; one operation (or ALL).
  ``validate_binding`` refuses any other, with the message Kafka gives (INVALID_REQUEST).
- An ``AclBindingFilter`` selects bindings, as DescribeAcls and DeleteAcls do: ANY (or a null
  name, principal or host) matches every value; pattern type MATCH selects the bindings that
  would apply to the named resource (the literal name, the wildcard ``*``, or a prefix of it).
- The wire helpers read the requests kio decodes (attributes) or plain mappings (keys), and
  build the response dicts: DescribeAcls groups bindings by resource pattern, DeleteAcls
  answers each filter with the bindings it matched (a binding matched by several filters is
  deleted once).

Nothing here authorizes anything: ``authorizer.Authorizer`` evaluates the bindings.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, TypeVar

from ..errors import Errors

WILDCARD_RESOURCE = "*"  # a LITERAL name matching every resource of its type
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource


class ResourceType(IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's ``PatternType`` codes (ANY and MATCH only in filters)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` codes; bit ``code`` of an authorized-operations field."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    """Kafka's ``AclPermissionType`` codes (ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _code(enum: type[IntEnum], value: int) -> Any:
    """Kafka's ``fromCode``: a code this broker does not know is UNKNOWN."""
    try:
        return enum(value)
    except ValueError:
        return enum(0)


_CODES = {"resource_type": ResourceType, "pattern_type": PatternType,
          "operation": AclOperation, "permission_type": AclPermissionType}


def _coerce_codes(frozen: Any) -> None:
    """Plain ints given for the codes become the enums' members (unknown codes UNKNOWN)."""
    for field, enum in _CODES.items():
        object.__setattr__(frozen, field, _code(enum, getattr(frozen, field)))


class AclEntry(Protocol):
    """An ACL of the metadata image (the ``AccessControlEntry`` record): codes and strings."""

    @property
    def id(self) -> Hashable: ...
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def pattern_type(self) -> int: ...
    @property
    def principal(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


E = TypeVar("E", bound=AclEntry)


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's ``AclBinding``)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        _coerce_codes(self)

    @classmethod
    def of(cls, acl: Any) -> AclBinding:
        """The binding of any object with the fields' names (an image's ``AclEntry``)."""
        return cls(acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal,
                   acl.host, acl.operation, acl.permission_type)


@dataclass(frozen=True)
class AclBindingFilter:
    """Selects bindings (Kafka's ``AclBindingFilter``): ANY codes and None strings match all."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        _coerce_codes(self)

    def matches(self, binding: Any) -> bool:
        """Whether the binding (or an image's ACL) is selected."""
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, b: Any) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, b.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type != PatternType.MATCH:
            return self.resource_name == b.resource_name
        if b.pattern_type == PatternType.LITERAL:
            return b.resource_name in (self.resource_name, WILDCARD_RESOURCE)
        return (b.pattern_type == PatternType.PREFIXED
                and self.resource_name.startswith(b.resource_name))

    def _matches_entry(self, b: Any) -> bool:
        return (self.principal in (None, b.principal)
                and self.host in (None, b.host)
                and self.operation in (AclOperation.ANY, b.operation)
                and self.permission_type in (AclPermissionType.ANY, b.permission_type))


ANY_FILTER = AclBindingFilter()


# -- validation ---------------------------------------------------------------------------------


def validate_binding(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses the binding (INVALID_REQUEST), or None when it may be created."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {binding.permission_type.name}"
    if not binding.resource_name:
        return "Resource name should not be empty"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    return _principal_error(binding.principal) or _host_error(binding.host)


def _principal_error(principal: str) -> str | None:
    kind, colon, name = principal.partition(":")
    if not colon or not kind or not name:
        return (f"Could not parse principal from `{principal}` (expected "
                "principalType:principalName)")
    return None


def _host_error(host: str) -> str | None:
    if host == WILDCARD_HOST:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"Invalid host `{host}`: an IP address or {WILDCARD_HOST}"
    return None


def validate_filter(acl_filter: AclBindingFilter) -> str | None:
    """Why DescribeAcls or DeleteAcls refuses the filter (INVALID_REQUEST), or None."""
    for field in ("resource_type", "pattern_type", "operation", "permission_type"):
        if getattr(acl_filter, field) == 0:  # UNKNOWN in each of the enums
            return f"Unknown {field} in the filter"
    return None


# -- requests -----------------------------------------------------------------------------------


def _get(wire: Any, name: str, default: Any = None) -> Any:
    """A field of a kio request object, or a key of a plain mapping."""
    if isinstance(wire, Mapping):
        return wire.get(name, default)
    return getattr(wire, name, default)


def binding_from_creation(creation: Any) -> AclBinding:
    """A CreateAcls ``creations`` element's binding (unknown codes become UNKNOWN)."""
    return AclBinding(
        _code(ResourceType, _get(creation, "resource_type", 0)),
        _get(creation, "resource_name", "") or "",
        _code(PatternType, _get(creation, "resource_pattern_type", PatternType.LITERAL)),
        _get(creation, "principal", "") or "",
        _get(creation, "host", "") or "",
        _code(AclOperation, _get(creation, "operation", 0)),
        _code(AclPermissionType, _get(creation, "permission_type", 0)),
    )


def filter_from_wire(wire: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request, or of one of a DeleteAcls request's ``filters``
    (the same field names)."""
    return AclBindingFilter(
        _code(ResourceType, _get(wire, "resource_type_filter", 0)),
        _get(wire, "resource_name_filter"),
        _code(PatternType, _get(wire, "pattern_type_filter", PatternType.LITERAL)),
        _get(wire, "principal_filter"),
        _get(wire, "host_filter"),
        _code(AclOperation, _get(wire, "operation", 0)),
        _code(AclPermissionType, _get(wire, "permission_type", 0)),
    )


# -- responses ----------------------------------------------------------------------------------


def creation_result(error: str | None) -> dict:
    """A CreateAcls ``results`` element: success, or INVALID_REQUEST with the reason."""
    if error is None:
        return {"error_code": Errors.NONE, "error_message": None}
    return {"error_code": Errors.INVALID_REQUEST, "error_message": error}


def describe_result(bindings: Iterable[Any], error: str | None = None) -> dict:
    """A DescribeAcls response's body but its throttle time: the bindings, or the error."""
    if error is not None:
        return {"error_code": Errors.INVALID_REQUEST, "error_message": error, "resources": []}
    return {"error_code": Errors.NONE, "error_message": None,
            "resources": describe_resources(bindings)}


def describe_resources(bindings: Iterable[Any]) -> list[dict]:
    """DescribeAcls's ``resources``: the bindings grouped by resource pattern (sorted)."""
    groups: dict[tuple[int, str, int], list[dict]] = {}
    for b in bindings:
        key = (int(b.resource_type), b.resource_name, int(b.pattern_type))
        groups.setdefault(key, []).append(
            {"principal": b.principal, "host": b.host, "operation": int(b.operation),
             "permission_type": int(b.permission_type)})
    return [{"resource_type": t, "resource_name": n, "pattern_type": p,
             "acls": sorted(acls, key=_acl_order)}
            for (t, n, p), acls in sorted(groups.items())]


def _acl_order(acl: dict) -> tuple:
    return acl["principal"], acl["host"], acl["operation"], acl["permission_type"]


def matching_acl(binding: Any) -> dict:
    """A DeleteAcls ``matching_acls`` element: a deleted binding."""
    return {"error_code": Errors.NONE, "error_message": None,
            "resource_type": int(binding.resource_type), "resource_name": binding.resource_name,
            "pattern_type": int(binding.pattern_type), "principal": binding.principal,
            "host": binding.host, "operation": int(binding.operation),
            "permission_type": int(binding.permission_type)}


def filter_result(matches: Iterable[Any], error: str | None = None) -> dict:
    """A DeleteAcls ``filter_results`` element: the bindings a filter deleted, or its error."""
    if error is not None:
        return {"error_code": Errors.INVALID_REQUEST, "error_message": error,
                "matching_acls": []}
    return {"error_code": Errors.NONE, "error_message": None,
            "matching_acls": [matching_acl(b) for b in matches]}


def deletions(acls: Iterable[E], filters: Sequence[AclBindingFilter],
              ) -> tuple[list[list[E] | str], list[Hashable]]:
    """What DeleteAcls does to the image's ACLs: per filter, the ACLs it matches (or why the
    filter is refused); and the ids to remove, each once, in the order first matched."""
    acls = list(acls)
    per_filter: list[list[E] | str] = []
    ids: dict[Hashable, None] = {}
    for acl_filter in filters:
        error = validate_filter(acl_filter)
        if error is not None:
            per_filter.append(error)
            continue
        matched = [acl for acl in acls if acl_filter.matches(acl)]
        ids.update((acl.id, None) for acl in matched)
        per_filter.append(matched)
    return per_filter, list(ids)
