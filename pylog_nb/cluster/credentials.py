"""Where this account's tools find a running local cluster's credentials, by its address.

Theory of operation (kubeconfig's idea, for one machine): a started ``LocalCluster`` writes one
file, 0600 in a 0700 directory of its owner's (``~/.cache/pylog-nb/clusters``, or
``$PYLOG_CREDENTIALS_DIR``), naming its brokers' and admin endpoints' addresses with the client
settings and admin token that open them. Every Kafka client this package makes
(``client_config``) and every call to an admin endpoint looks its address up there, so the
magics, the view, the check, the CLI and the Spark source's Python workers (other processes,
started later or earlier than the cluster) all authenticate without anyone typing a password.
Another account cannot read the directory. ``stop()`` removes the file.

A lookup reads the directory each time (a handful of small files): a cluster restarted on other
ports, or stopped, is seen at once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

CREDENTIALS_DIR_ENV = "PYLOG_CREDENTIALS_DIR"
_DIR_MODE = 0o700
_FILE_MODE = 0o600


def credentials_dir() -> Path:
    configured = os.environ.get(CREDENTIALS_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "pylog-nb" / "clusters"


def publish(data_dir: Path, bootstrap: list[str], admin: list[str], client: dict[str, str],
            admin_token: str | None) -> None:
    """Record a running cluster's addresses and credentials (replacing its earlier record)."""
    directory = credentials_dir()
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(directory, _DIR_MODE)
    path = _path(directory, data_dir)
    _forget_addresses(directory, {*bootstrap, *admin}, keep=path)
    temporary = path.with_suffix(".tmp")
    record = {"data_dir": str(data_dir), "bootstrap": bootstrap, "admin": admin,
              "client": client, "admin_token": admin_token}
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE), "w") as out:
        json.dump(record, out)
    os.replace(temporary, path)


def withdraw(data_dir: Path) -> None:
    """Forget a stopped cluster."""
    _path(credentials_dir(), data_dir).unlink(missing_ok=True)


def client_settings(bootstrap: str) -> dict[str, str]:
    """The security settings of the local cluster one of ``bootstrap``'s addresses belongs to
    ({} for any other cluster)."""
    addresses = {a.strip() for a in bootstrap.split(",")}
    record = _find(lambda r: bool(addresses & set(r.get("bootstrap", ()))))
    return dict(record.get("client", {})) if record else {}


def admin_headers(address: str) -> dict[str, str]:
    """The Authorization header for an admin endpoint at ``host:port`` ({} if none is known)."""
    record = _find(lambda r: address in r.get("admin", ()))
    token = record.get("admin_token") if record else None
    return {"Authorization": f"Bearer {token}"} if token else {}


def _forget_addresses(directory: Path, addresses: set[str], keep: Path) -> None:
    """Remove the records of clusters that ended without ``stop()`` (a killed kernel) and whose
    ports a new cluster now listens on."""
    for path, record in _records(directory):
        if path != keep and addresses & {*record.get("bootstrap", ()), *record.get("admin", ())}:
            path.unlink(missing_ok=True)


def _find(wanted) -> dict[str, Any] | None:
    return next((record for _path, record in _records(credentials_dir()) if wanted(record)),
                None)


def _records(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every record, the newest first."""
    found = []
    try:
        paths = list(directory.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            found.append((path.stat().st_mtime_ns, path,
                          json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    found.sort(key=lambda item: item[0], reverse=True)
    return [(path, record) for _mtime, path, record in found if isinstance(record, dict)]


def _path(directory: Path, data_dir: Path) -> Path:
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return directory / f"{digest}.json"
