"""Who is connected to this broker now: one row per live client connection, without I/O.

Theory of operation. The network shell (``network.py``) tells the table of each connection it
serves: ``add`` when it is accepted, ``signed_in`` once its authenticator names a principal (at
once on a PLAINTEXT listener: ``User:ANONYMOUS``), ``on_request`` for every request it parses
(the header's client id; an ApiVersions v3+ request's client software name and version, KIP-511)
and ``remove`` when it closes. ``GET /v1/connections`` (``admin_http.py``) lists the rows; the
live view groups them by principal.

A connection of the brokers' own (replication, transaction markers, share state) signs in as the
inter-broker user: its row says ``role: "broker"``, as does one that sent a replica Fetch (the
only sign of a peer broker on a listener without SASL). Every other row is a ``"client"``.

Bounded: at most ``CONNECTIONS_TRACKED_MAX`` rows. Connections accepted past that are only
counted (``untracked``) until they close; nothing is evicted, so a row, once listed, stays until
its connection closes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

CONNECTIONS_TRACKED_MAX = 1000  # rows kept; more connections are counted, not listed
CLIENT_TEXT_MAX = 256  # characters kept of what a client names itself (client id, software)
BROKER_ROLE = "broker"
CLIENT_ROLE = "client"


@dataclass(slots=True)
class ConnectionRow:
    """One live connection as ``GET /v1/connections`` lists it."""

    connection_id: str
    peer: str  # "host:port" of the client's end
    connected_ms: int
    principal: str | None = None  # None until it authenticated
    mechanism: str | None = None  # the SASL mechanism it signed in with (None: PLAINTEXT)
    client_id: str | None = None  # the newest request header's
    software_name: str | None = None  # ApiVersions v3+ (KIP-511)
    software_version: str | None = None
    requests: int = 0  # requests served (parsed) on it
    last_api_key: int | None = None
    last_request_ms: int | None = None
    role: str = CLIENT_ROLE


class ConnectionTable:
    """A broker's live connections, at most ``capacity`` listed."""

    def __init__(self, inter_broker_principal: str | None = None,
                 capacity: int = CONNECTIONS_TRACKED_MAX) -> None:
        self.inter_broker_principal = inter_broker_principal
        self.capacity = capacity
        self._rows: dict[str, ConnectionRow] = {}
        self.untracked = 0  # live connections past the capacity

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, connection_id: str, peer: str, now_ms: int) -> bool:
        """A new connection; False when the table is full (it is only counted)."""
        if len(self._rows) >= self.capacity:
            self.untracked += 1
            return False
        self._rows[connection_id] = ConnectionRow(connection_id, peer, now_ms)
        return True

    def signed_in(self, connection_id: str, principal: str, mechanism: str | None) -> None:
        row = self._rows.get(connection_id)
        if row is None:
            return
        row.principal, row.mechanism = principal, mechanism
        if principal == self.inter_broker_principal:
            row.role = BROKER_ROLE

    def on_request(self, connection_id: str, api_key: int, client_id: str | None, now_ms: int,
                   *, software: tuple[str | None, str | None] | None = None,
                   from_broker: bool = False) -> None:
        """A request parsed on the connection: ``software`` from an ApiVersions v3+ body,
        ``from_broker`` when it is a replica's Fetch."""
        row = self._rows.get(connection_id)
        if row is None:
            return
        row.requests += 1
        row.last_api_key, row.last_request_ms = api_key, now_ms
        if client_id is not None and client_id != row.client_id:
            row.client_id = client_id[:CLIENT_TEXT_MAX]
        if software is not None:
            name, version = software
            row.software_name = None if name is None else name[:CLIENT_TEXT_MAX]
            row.software_version = None if version is None else version[:CLIENT_TEXT_MAX]
        if from_broker:
            row.role = BROKER_ROLE

    def remove(self, connection_id: str, tracked: bool = True) -> None:
        """The connection closed (``tracked``: what ``add`` answered for it)."""
        if not tracked:
            self.untracked = max(0, self.untracked - 1)
            return
        self._rows.pop(connection_id, None)

    def rows(self) -> list[ConnectionRow]:
        """The listed connections, oldest first."""
        return sorted(self._rows.values(), key=lambda r: (r.connected_ms, r.connection_id))

    def view(self) -> dict:
        """What ``GET /v1/connections`` answers."""
        return {"connections": [dataclasses.asdict(row) for row in self.rows()],
                "untracked": self.untracked, "capacity": self.capacity}
