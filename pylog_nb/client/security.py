"""ACLs and SCRAM users through Kafka's admin API (confluent-kafka), as DataFrames.

Theory of operation: every call goes through ``AdminClient`` with this package's client settings
(the owner's credentials for a local cluster), so the same functions manage a real Kafka's ACLs
and users. An ACL names a resource (topic, group, transactional id or the cluster), a pattern
(``literal``: that name, or ``*`` for every name; ``prefixed``: every name starting with it), a
principal (``User:alice``, ``User:*``), a host (``*``), an operation and allow or deny; Kafka's
authorizer lets a request through when some ALLOW matches and no DENY does. A password is made
for a new user when none is given (``secrets.token_urlsafe``) and returned once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import pandas as pd
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from .config import client_config

ADMIN_TIMEOUT_S = 15.0
CLUSTER_RESOURCE = "kafka-cluster"  # the one name of the cluster resource
SCRAM_ITERATIONS = 4096  # Kafka's minimum and kafka-configs.sh's default
PASSWORD_BYTES = 18  # a generated password: 24 URL-safe characters
RESOURCE_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                  "transactional_id": ResourceType.TRANSACTIONAL_ID,
                  "cluster": ResourceType.BROKER}  # librdkafka's name for the cluster resource
PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL,
                 "prefixed": ResourcePatternType.PREFIXED}
OPERATIONS = {op.name.lower(): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
ACL_COLUMNS = ["principal", "permission", "operation", "resource_type", "pattern", "name",
               "host"]


class SecurityAdminError(ValueError):
    """A request the cluster refused, or that cannot be asked; the message is one line."""


@dataclass(frozen=True)
class AclSpec:
    """One ACL as the magics and notebooks say it."""

    principal: str
    operation: str
    resource_type: str
    name: str
    pattern: str = "literal"
    permission: str = "allow"
    host: str = "*"

    def binding(self) -> AclBinding:
        return AclBinding(_resource_type(self.resource_type), self._name(),
                          _pattern(self.pattern), _principal(self.principal), self.host,
                          _operation(self.operation), _permission(self.permission))

    def binding_filter(self) -> AclBindingFilter:
        return AclBindingFilter(_resource_type(self.resource_type), self._name(),
                                _pattern(self.pattern), _principal(self.principal), self.host,
                                _operation(self.operation), _permission(self.permission))

    def _name(self) -> str:
        return CLUSTER_RESOURCE if self.resource_type == "cluster" else self.name


def add_acls(bootstrap: str, specs: list[AclSpec]) -> None:
    """Create the ACLs (an ACL that exists already is no error, as in Kafka)."""
    admin = _admin(bootstrap)
    for future in admin.create_acls([s.binding() for s in specs], request_timeout=ADMIN_TIMEOUT_S
                                    ).values():
        _result(future)


def acls_frame(bootstrap: str, principal: str | None = None,
               resource_type: str | None = None, name: str | None = None) -> pd.DataFrame:
    """The ACLs, one row each, optionally of one principal or resource."""
    # None matches any value (librdkafka's filters; the stubs say str)
    wanted = AclBindingFilter(
        _resource_type(resource_type) if resource_type else ResourceType.ANY,
        name,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        _principal(principal) if principal else None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY, AclPermissionType.ANY)
    admin = _admin(bootstrap)  # kept: a future fails if its client is destroyed first
    bindings = _result(admin.describe_acls(wanted, request_timeout=ADMIN_TIMEOUT_S))
    rows = [_row(b) for b in bindings]
    frame = pd.DataFrame(rows, columns=ACL_COLUMNS)
    return frame.sort_values(ACL_COLUMNS).reset_index(drop=True)


def remove_acls(bootstrap: str, specs: list[AclSpec]) -> int:
    """Delete the ACLs matching each spec; how many were deleted."""
    admin = _admin(bootstrap)
    futures = admin.delete_acls([s.binding_filter() for s in specs],
                                request_timeout=ADMIN_TIMEOUT_S)
    return sum(len(_result(future)) for future in futures.values())


def add_user(bootstrap: str, user: str, password: str | None = None,
             mechanism: str = "SCRAM-SHA-512") -> str:
    """Create (or change) a SCRAM user for ``mechanism``; the password (made if not given)."""
    if mechanism not in MECHANISMS:
        raise SecurityAdminError(f"mechanism {mechanism!r}: one of {', '.join(MECHANISMS)}")
    password = password or secrets.token_urlsafe(PASSWORD_BYTES)
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(MECHANISMS[mechanism], SCRAM_ITERATIONS), password.encode())
    admin = _admin(bootstrap)
    for future in admin.alter_user_scram_credentials(
            [upsertion], request_timeout=ADMIN_TIMEOUT_S).values():
        _result(future)
    return password


def users_frame(bootstrap: str) -> pd.DataFrame:
    """Every SCRAM user with its mechanisms and iterations."""
    admin = _admin(bootstrap)
    described = _result(admin.describe_user_scram_credentials(request_timeout=ADMIN_TIMEOUT_S))
    rows = [{"user": user, "mechanism": info.mechanism.name.replace("_", "-"),
             "iterations": info.iterations}
            for user, description in sorted(described.items())
            for info in description.scram_credential_infos]
    return pd.DataFrame(rows, columns=["user", "mechanism", "iterations"])


def remove_user(bootstrap: str, user: str) -> int:
    """Delete every SCRAM credential of ``user``; how many were deleted."""
    mechanisms = users_frame(bootstrap).query("user == @user")["mechanism"]
    if mechanisms.empty:
        raise SecurityAdminError(f"no SCRAM user {user!r}")
    deletions: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(user, MECHANISMS[m]) for m in mechanisms]
    admin = _admin(bootstrap)
    for future in admin.alter_user_scram_credentials(
            deletions, request_timeout=ADMIN_TIMEOUT_S).values():
        _result(future)
    return len(deletions)


def user_config(bootstrap: str, user: str, password: str,
                mechanism: str = "SCRAM-SHA-512") -> dict:
    """Client settings that sign in as ``user`` (the package's, with that user's credentials;
    a TLS cluster's protocol, SASL_SSL, and CA kept)."""
    owner = client_config(bootstrap)
    protocol = owner.get("security.protocol", "SASL_PLAINTEXT")
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        protocol = "SASL_SSL" if protocol == "SSL" else "SASL_PLAINTEXT"
    return client_config(bootstrap, **{"security.protocol": protocol,
                                       "sasl.mechanism": mechanism, "sasl.username": user,
                                       "sasl.password": password})


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient(client_config(bootstrap))


def _result(future):
    try:
        return future.result()
    except KafkaException as error:
        raise SecurityAdminError(error.args[0].str()) from None


def _row(binding: AclBinding) -> dict:
    cluster = binding.restype == ResourceType.BROKER
    return {"principal": binding.principal, "permission": _word(binding.permission_type),
            "operation": _word(binding.operation),
            "resource_type": "cluster" if cluster else _word(binding.restype),
            "pattern": _word(binding.resource_pattern_type), "name": binding.name,
            "host": binding.host}


def _word(value: object) -> str:
    """An enum member's name in lower case (the stubs allow str and int too)."""
    return str(getattr(value, "name", value)).lower()


def _resource_type(text: str) -> ResourceType:
    return _choice(RESOURCE_TYPES, text, "resource type")


def _pattern(text: str) -> ResourcePatternType:
    return _choice(PATTERN_TYPES, text, "pattern")


def _operation(text: str) -> AclOperation:
    return _choice(OPERATIONS, text, "operation")


def _permission(text: str) -> AclPermissionType:
    return _choice({"allow": AclPermissionType.ALLOW, "deny": AclPermissionType.DENY}, text,
                   "permission")


def _principal(text: str) -> str:
    principal = text if ":" in text else f"User:{text}"
    if not principal.split(":", 1)[1]:
        raise SecurityAdminError(f"principal {text!r}: say User:NAME (or NAME)")
    return principal


def _choice(table: dict, text: str, what: str):
    key = text.strip().lower().replace("-", "_")
    if key not in table:
        raise SecurityAdminError(f"{what} {text!r}: one of {', '.join(sorted(table))}")
    return table[key]
