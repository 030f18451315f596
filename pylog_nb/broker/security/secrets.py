"""A cluster's secrets: one 0600 JSON file in its data directory, written by its supervisor.

Theory of operation: ``LocalCluster`` generates the secrets once, when it first creates a data
directory, and every process of the cluster reads them from that file (its path on the command
line, never a secret: another account can read any process's argv, not its owner's 0600 file).

- ``internal_token``: the controllers' RPC and Raft listeners take a connection only after it
  presents this token; brokers present it to the controllers (broker-to-controller and
  controller-to-controller traffic).
- ``admin_http_token``: the brokers' admin HTTP endpoint answers 401 without it (the view and the
  cluster's own tools send it as ``Authorization: Bearer``).
- ``users``: SCRAM users the controller writes to the metadata log when it finds them missing:
  the owner's admin principal and the inter-broker principal, both super users.

Nothing here opens a socket; ``generate`` draws from ``secrets`` (the OS's CSPRNG).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECRETS_FILE = "secrets.json"
SECRETS_FILE_MODE = 0o600
SECRETS_VERSION = 1
TOKEN_BYTES = 32  # 256 bits, written as 64 hex digits
PASSWORD_BYTES = 24  # 192 bits, written as 32 URL-safe characters
ADMIN_USER = "admin"
INTER_BROKER_USER = "pylog-broker"


class SecretsError(ValueError):
    """The secrets file is missing, unreadable, not private, or malformed."""


@dataclass(frozen=True)
class ClusterSecrets:
    internal_token: str
    admin_http_token: str
    users: dict[str, str] = field(default_factory=dict)  # SCRAM user -> password
    admin_user: str = ADMIN_USER
    inter_broker_user: str = INTER_BROKER_USER

    def __post_init__(self) -> None:
        assert self.admin_user in self.users and self.inter_broker_user in self.users, \
            "the admin and inter-broker users have passwords"

    @property
    def admin_password(self) -> str:
        return self.users[self.admin_user]

    @property
    def inter_broker_password(self) -> str:
        return self.users[self.inter_broker_user]

    @property
    def super_users(self) -> tuple[str, ...]:
        """Kafka's ``super.users``: principals every ACL check allows."""
        return (f"User:{self.admin_user}", f"User:{self.inter_broker_user}")

    def to_json(self) -> dict[str, Any]:
        return {"version": SECRETS_VERSION, "internal_token": self.internal_token,
                "admin_http_token": self.admin_http_token, "users": dict(self.users),
                "admin_user": self.admin_user, "inter_broker_user": self.inter_broker_user}


def generate() -> ClusterSecrets:
    """Fresh secrets for a new cluster."""
    return ClusterSecrets(
        internal_token=secrets.token_hex(TOKEN_BYTES),
        admin_http_token=secrets.token_hex(TOKEN_BYTES),
        users={ADMIN_USER: secrets.token_urlsafe(PASSWORD_BYTES),
               INTER_BROKER_USER: secrets.token_urlsafe(PASSWORD_BYTES)})


def write(path: Path, cluster_secrets: ClusterSecrets) -> None:
    """Write ``path`` as its owner's alone (created 0600, never readable by others between
    creation and chmod), replacing it atomically."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRETS_FILE_MODE)
    with open(fd, "w", encoding="utf-8") as out:
        json.dump(cluster_secrets.to_json(), out, indent=1, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(temporary, SECRETS_FILE_MODE)
    os.replace(temporary, path)


def load(path: Path) -> ClusterSecrets:
    """The secrets in ``path``; SecretsError (one line) if it is absent, readable by others,
    or malformed."""
    try:
        mode = path.stat().st_mode & 0o777
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SecretsError(f"cannot read the cluster's secrets {path}: {error}") from None
    if mode & 0o077:
        raise SecretsError(f"{path} is readable by other accounts (mode {mode:o}); "
                           f"chmod 600 it")
    try:
        if raw.get("version") != SECRETS_VERSION:
            raise ValueError(f"version {raw.get('version')!r}, expected {SECRETS_VERSION}")
        return ClusterSecrets(
            internal_token=_text(raw["internal_token"]),
            admin_http_token=_text(raw["admin_http_token"]),
            users={_text(u): _text(p) for u, p in raw["users"].items()},
            admin_user=_text(raw["admin_user"]), inter_broker_user=_text(raw["inter_broker_user"]))
    except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as error:
        raise SecretsError(f"malformed secrets file {path}: {error!r}") from None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {type(value).__name__}")
    return value
