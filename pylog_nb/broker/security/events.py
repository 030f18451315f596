"""Security events a broker adds to its introspection stream (``GET /v1/events``): refusals.

Each carries one line of ``text`` the live view's timeline shows under "security". A client that
keeps failing adds at most one event per ``REFUSAL_EVENT_INTERVAL_MS`` per host and kind, so a
password guesser cannot push the replication events out of the bounded stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

REFUSAL_EVENT_INTERVAL_MS = 1_000


@dataclass(frozen=True, slots=True)
class AuthenticationFailed:
    """A connection failed to sign in (or asked for something before it did)."""

    EVENT: ClassVar[bool] = True
    now_ms: int
    host: str
    reason: str
    text: str = field(default="")

    def __post_init__(self) -> None:
        if not self.text:
            object.__setattr__(self, "text", f"a client at {self.host} was refused: "
                                             f"{self.reason}")


@dataclass(frozen=True, slots=True)
class AuthorizationFailed:
    """An authenticated principal was refused an operation on a resource by the ACLs."""

    EVENT: ClassVar[bool] = True
    now_ms: int
    principal: str
    host: str
    operation: str
    resource: str
    text: str = field(default="")

    def __post_init__(self) -> None:
        if not self.text:
            object.__setattr__(self, "text", f"{self.principal} denied {self.operation} on "
                                             f"{self.resource}")


class RefusalThrottle:
    """Whether a refusal is worth an event: not if the same key had one in the last interval."""

    def __init__(self, interval_ms: int = REFUSAL_EVENT_INTERVAL_MS) -> None:
        self.interval_ms = interval_ms
        self._last_ms: dict[tuple, int] = {}

    def admit(self, key: tuple, now_ms: int) -> bool:
        last_ms = self._last_ms.get(key)
        if last_ms is not None and now_ms - last_ms < self.interval_ms:
            return False
        if len(self._last_ms) > 10_000:  # a bounded memory of who failed lately
            self._last_ms.clear()
        self._last_ms[key] = now_ms
        return True
