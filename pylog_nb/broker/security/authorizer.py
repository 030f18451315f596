"""Authorization by ACLs, with the semantics of Kafka's ``StandardAuthorizer``, sans-IO.

Theory of operation: the ``Authorizer`` holds the image's ACLs (``acls.AclEntry``: the
``AccessControlEntry`` records), indexed so that a check touches only the ACLs that can apply:

- LITERAL ACLs by (resource type, name); the wildcard name ``*`` is one such name;
- PREFIXED ACLs by resource type, then prefix; a check looks up the resource name's prefixes of
  the lengths that some prefixed ACL of that type has.

``authorize(principal, host, operation, resource type, name)`` then decides as Kafka does:

1. a super user (``super.users``, e.g. ``User:admin``) is allowed everything;
2. an ACL applies when its pattern matches the resource, its principal is the caller's or
   ``User:*``, and its host is the caller's address or ``*``;
3. any applying DENY of the operation (or of ALL) denies; DENY wins over every ALLOW;
4. else an applying ALLOW of the operation allows; ALLOW of ALL allows everything, ALLOW of
   READ, WRITE, DELETE or ALTER implies DESCRIBE, ALLOW of ALTER_CONFIGS implies
   DESCRIBE_CONFIGS (implication is for ALLOW only: DENY READ denies no DESCRIBE);
5. else, when no ACL at all matches the resource (whoever its principal), the answer is
   ``allow.everyone.if.no.acl.found`` (default false); otherwise deny.

``authorized_operations`` is the bit field of Describe* responses (bit ``code`` for each
``AclOperation`` the caller may do among those Kafka defines for the resource type);
``authorize_any`` is KIP-679's authorization by resource type (may the caller WRITE some
transactional id, or some topic?), Kafka's default algorithm. The broker calls ``load`` (or
``add``/``remove``) as the image's ACLs change; nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import Errors
from .acls import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})
# Kafka's AclEntry.supportedOperations: what authorized_operations reports, per resource type
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE,
                                   Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS,
                                   Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                                     Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER,
                                     Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}
AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: Errors.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: Errors.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: Errors.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's Integer.MIN_VALUE: not asked for
# authorize_any first asks about a resource of this (arbitrary) name, as Kafka does: that lets
# super users (and allow.everyone.if.no.acl.found) through whatever the DENY ACLs say
_PROBE_NAME = "hardcode"


def authorization_error(resource_type: int) -> Errors:
    """The error a request gets when refused on a resource of this type."""
    return AUTHORIZATION_ERRORS[ResourceType(resource_type)]


@dataclass(frozen=True, slots=True)
class _Ace:
    """An indexed ACL's entry: what a check compares once the pattern matched."""

    id: Hashable
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


def _verdict(ace: _Ace, principal: str, host: str, operation: AclOperation,
             ) -> AclPermissionType | None:
    """ALLOW or DENY when the entry applies to the caller and the operation, else None."""
    if ace.principal != principal and ace.principal != WILDCARD_PRINCIPAL:
        return None
    if ace.host != host and ace.host != WILDCARD_HOST:
        return None
    if ace.operation != Op.ALL and ace.operation != operation and not (
            ace.permission_type == ALLOW and _implies(ace.operation, operation)):
        return None
    return ace.permission_type


def _implies(granted: AclOperation, wanted: AclOperation) -> bool:
    if wanted == Op.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    return wanted == Op.DESCRIBE_CONFIGS and granted in IMPLIES_DESCRIBE_CONFIGS


class Authorizer:
    """The ACLs of the image and the broker's authorizer configuration."""

    def __init__(self, acls: Iterable[AclEntry] = (), *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.load(acls)

    # -- the image's ACLs -----------------------------------------------------------------------

    def load(self, acls: Iterable[AclEntry]) -> None:
        """Replace every ACL (the image was loaded or rebuilt)."""
        self._bindings: dict[Hashable, AclBinding] = {}
        self._literal: dict[tuple[int, str], list[_Ace]] = {}
        self._prefixed: dict[int, dict[str, list[_Ace]]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}  # sorted, distinct
        self._length_counts: dict[tuple[int, int], int] = {}  # (type, length) -> ACLs
        for acl in acls:
            self.add(acl)

    def add(self, acl: AclEntry) -> None:
        """An ACL was created (an AccessControlEntry record); replaces one of the same id."""
        if acl.id in self._bindings:
            self.remove(acl.id)
        binding = AclBinding.of(acl)
        self._bindings[acl.id] = binding
        ace = _Ace(acl.id, binding.principal, binding.host, binding.operation,
                   binding.permission_type)
        rtype, name = int(binding.resource_type), binding.resource_name
        if binding.pattern_type == PatternType.LITERAL:
            self._literal.setdefault((rtype, name), []).append(ace)
        elif binding.pattern_type == PatternType.PREFIXED:
            self._prefixed.setdefault(rtype, {}).setdefault(name, []).append(ace)
            self._count_length(rtype, len(name), +1)

    def remove(self, acl_id: Hashable) -> None:
        """An ACL was deleted (a RemoveAccessControlEntry record); unknown ids are ignored."""
        binding = self._bindings.pop(acl_id, None)
        if binding is None:
            return
        rtype, name = int(binding.resource_type), binding.resource_name
        if binding.pattern_type == PatternType.LITERAL:
            _drop(self._literal, (rtype, name), acl_id)
        elif binding.pattern_type == PatternType.PREFIXED:
            _drop(self._prefixed[rtype], name, acl_id)
            self._count_length(rtype, len(name), -1)

    def _count_length(self, rtype: int, length: int, change: int) -> None:
        """Keep the lengths of the type's prefixes: the only ones a check looks up."""
        key = (rtype, length)
        count = self._length_counts.get(key, 0) + change
        lengths = self._prefix_lengths.setdefault(rtype, [])
        if count and key not in self._length_counts:
            bisect.insort(lengths, length)
        elif not count:
            lengths.remove(length)
        if count:
            self._length_counts[key] = count
        else:
            del self._length_counts[key]

    def acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings a filter selects (all without one): what DescribeAcls returns."""
        return [b for b in self._bindings.values()
                if acl_filter is None or acl_filter.matches(b)]

    def __len__(self) -> int:
        return len(self._bindings)

    # -- checks ---------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  resource_name: str) -> bool:
        """May ``principal`` (``Type:name``) connected from ``host`` (its IP address) do
        ``operation`` on the LITERAL resource?"""
        if principal in self.super_users:
            return True
        operation = AclOperation(operation)
        assert operation not in (Op.UNKNOWN, Op.ANY), operation
        found_acl = allowed = False
        for ace in self._applicable(int(resource_type), resource_name):
            found_acl = True
            verdict = _verdict(ace, principal, host, operation)
            if verdict == DENY:
                return False
            allowed = allowed or verdict == ALLOW
        return allowed or (not found_acl and self.allow_everyone_if_no_acl_found)

    def _applicable(self, rtype: int, name: str) -> Iterable[_Ace]:
        """The entries of every ACL whose pattern matches the resource."""
        yield from self._literal.get((rtype, name), ())
        if name != WILDCARD_RESOURCE:
            yield from self._literal.get((rtype, WILDCARD_RESOURCE), ())
        prefixed = self._prefixed.get(rtype)
        if prefixed:
            for length in self._prefix_lengths[rtype]:
                if length > len(name):
                    break
                yield from prefixed.get(name[:length], ())

    def authorized_operations(self, principal: str, host: str, resource_type: int,
                              resource_name: str) -> int:
        """Kafka's authorized-operations bit field: bit ``code`` set for each operation of the
        resource type's supported ones that the caller may do on the resource."""
        field = 0
        for operation in SUPPORTED_OPERATIONS[ResourceType(resource_type)]:
            if self.authorize(principal, host, operation, resource_type, resource_name):
                field |= 1 << operation
        return field

    def authorize_any(self, principal: str, host: str, operation: int,
                      resource_type: int) -> bool:
        """KIP-679: may the caller do ``operation`` on *some* resource of the type? True when
        an ALLOW (of the operation or ALL, no implication) names a resource that no DENY
        covers; a DENY of the wildcard ``*`` denies all."""
        operation, rtype = AclOperation(operation), ResourceType(resource_type)
        if rtype in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"authorize_any needs a concrete resource type, not {rtype.name}")
        if operation in (Op.ANY, Op.UNKNOWN):
            raise ValueError(f"authorize_any needs a concrete operation, not {operation.name}")
        if self.authorize(principal, host, operation, rtype, _PROBE_NAME):
            return True
        allow, deny = _names_by_pattern(), _names_by_pattern()
        for b in self._bindings.values():
            if b.resource_type != rtype or not _entry_applies(b, principal, host, operation):
                continue
            if b.permission_type == DENY:
                if b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD_RESOURCE:
                    return False
                deny[b.pattern_type].add(b.resource_name)
            elif b.permission_type == ALLOW:
                allow[b.pattern_type].add(b.resource_name)
        if WILDCARD_RESOURCE in allow[PatternType.LITERAL]:
            return True
        return any(not _denied(name, pattern, deny)
                   for pattern, names in allow.items() for name in names)


def _names_by_pattern() -> dict[PatternType, set[str]]:
    return {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}


def _entry_applies(b: AclBinding, principal: str, host: str, operation: AclOperation) -> bool:
    return (b.host in (host, WILDCARD_HOST) and b.principal in (principal, WILDCARD_PRINCIPAL)
            and b.operation in (operation, Op.ALL))


def _denied(name: str, pattern: PatternType, deny: dict[PatternType, set[str]]) -> bool:
    """Whether the DENY ACLs cover every resource an ALLOW of ``name`` names."""
    if pattern == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
        return True
    return any(name[:length] in deny[PatternType.PREFIXED] for length in range(1, len(name) + 1))


def _drop(index: dict[Any, list[_Ace]], key: Any, acl_id: Hashable) -> None:
    remaining = [ace for ace in index[key] if ace.id != acl_id]
    if remaining:
        index[key] = remaining
    else:
        del index[key]
