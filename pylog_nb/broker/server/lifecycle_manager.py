"""A broker's standing with the controller: registration, heartbeats, lease, and catching up.

Theory of operation (Kafka's ``BrokerLifecycleManager``, sans-IO). The broker registers, then
heartbeats every ``heartbeat_interval_ms``; each heartbeat carries the metadata offset it has
applied, and the controller unfences it only once that offset covers the records that fenced it
(so a broker never leads again before it has applied its own demotion). The state machine:

    REGISTERING --registered--> RECOVERING --metadata applied up to catch_up_offset--> RUNNING
    RUNNING --stall detected, or a heartbeat answer saying "fenced" ahead of us--> RECOVERING
    any --heartbeat refused: not registered / stale incarnation--> REGISTERING

Only RUNNING serves: leads, completes acks=all produces, answers fetches, follows a leader.

A *stall* is the broker not running for longer than ``stall_ms_max``: a SIGSTOP, a swapped-out
VM, a laptop lid. The shell polls every ``LIFECYCLE_POLL_MS``; a gap between polls above the
bound, seen by ``poll`` or by ``serving`` (whichever runs first after the stall: queued requests
may be served before any timer fires), means the controller may have fenced this broker and
elected others meanwhile. Until a heartbeat *sent after the stall* is answered and the metadata
up to that answer's end offset is applied, the broker serves nothing. A stall shorter than the
bound cannot have cost the lease: ``stall_ms_max + heartbeat_interval_ms`` stays below the
session timeout (asserted). A broker that keeps running but cannot reach the controller (an
isolated broker, a controller restart) keeps serving, as in Kafka; the epochs and the ISR keep
that safe, and its first heartbeat answer afterwards tells it whether it was fenced.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..controller.controller import BROKER_HEARTBEAT_INTERVAL_MS, BROKER_SESSION_TIMEOUT_MS
from ..controller.errors import BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH

__all__ = [
    "LIFECYCLE_POLL_MS",
    "STALL_MS_MAX",
    "BrokerLifecycleManager",
    "LifecycleState",
    "SendHeartbeat",
    "SendRegistration",
]

LIFECYCLE_POLL_MS = 100  # the shell calls poll() this often
# A gap between polls above this is a stall (ten missed polls). Must stay well under the
# session timeout so that a stall too short to be caught cannot have cost the lease.
STALL_MS_MAX = 1_000
RETRY_BACKOFF_MS = 200  # after a failed registration or heartbeat


class LifecycleState(enum.Enum):
    REGISTERING = "registering"  # no registration acknowledged (start-up, or forgotten)
    RECOVERING = "recovering"  # must hear from the controller and apply its metadata first
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class SendRegistration:
    """Call register_broker with this incarnation; answer with on_registered/on_failed."""

    incarnation_id: str


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """Call heartbeat; answer with on_heartbeat_answer(sent_ms=...) or on_failed."""

    incarnation_id: str
    metadata_offset: int  # the next metadata offset to apply: everything below is applied
    sent_ms: int


class BrokerLifecycleManager:
    """Registration, heartbeats, stall detection and the gate that says when to serve."""

    def __init__(
        self,
        broker_id: int,
        incarnation_id: str,
        *,
        now_ms: int,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = BROKER_HEARTBEAT_INTERVAL_MS,
        stall_ms_max: int = STALL_MS_MAX,
    ) -> None:
        assert stall_ms_max + heartbeat_interval_ms < session_timeout_ms, (
            "a stall below the bound must not be able to cost the lease")
        self.broker_id = broker_id
        self.incarnation_id = incarnation_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.stall_ms_max = stall_ms_max
        self.state = LifecycleState.REGISTERING
        self.applied_offset = 0  # metadata records below this are applied
        self.catch_up_offset: int | None = None  # None: waiting for an answer to learn it
        self.fenced = True  # as the controller last said
        self.stall_count = 0
        self.lease_expiry_ms = -1  # the controller keeps this broker unfenced at least until then
        self._last_poll_ms = now_ms
        self._recovering_since_ms = now_ms  # answers to requests sent before this do not count
        self._in_flight = False
        self._next_request_ms = now_ms

    # == outputs ==================================================================================

    def poll(self, now_ms: int) -> list[SendRegistration | SendHeartbeat]:
        """Called every LIFECYCLE_POLL_MS: detect a stall, and say what to send now."""
        self._check_stall(now_ms)
        self._last_poll_ms = max(self._last_poll_ms, now_ms)
        if self._in_flight or now_ms < self._next_request_ms:
            return []
        self._in_flight = True
        if self.state is LifecycleState.REGISTERING:
            return [SendRegistration(self.incarnation_id)]
        return [SendHeartbeat(self.incarnation_id, self.applied_offset, now_ms)]

    @property
    def may_follow_metadata(self) -> bool:
        """Metadata is fetched only once this incarnation is registered: the answer to the
        registration comes after the controller has fenced any earlier incarnation, so no
        image this broker applies can still show the old incarnation leading."""
        return self.state is not LifecycleState.REGISTERING

    def serving(self, now_ms: int) -> bool:
        """May the broker lead, complete produces, answer fetches and follow right now?"""
        self._check_stall(now_ms)
        return self.state is LifecycleState.RUNNING

    def snapshot(self) -> dict:
        return {"state": self.state.value, "fenced": self.fenced,
                "applied_offset": self.applied_offset, "catch_up_offset": self.catch_up_offset,
                "stall_count": self.stall_count, "lease_expiry_ms": self.lease_expiry_ms}

    # == inputs ===================================================================================

    def on_registered(self, metadata_end_offset: int, now_ms: int) -> None:
        """The controller registered this incarnation (fenced until it has caught up)."""
        assert metadata_end_offset >= 0, metadata_end_offset
        self._answered(now_ms)
        self.fenced = True
        self._recover(now_ms, catch_up_offset=metadata_end_offset)

    def on_heartbeat_answer(
        self, sent_ms: int, fenced: bool, metadata_end_offset: int, now_ms: int
    ) -> None:
        """The controller answered the heartbeat sent at ``sent_ms``."""
        assert sent_ms <= now_ms and metadata_end_offset >= 0, (sent_ms, now_ms)
        self._answered(now_ms)
        self.fenced = fenced
        if not fenced:
            self.lease_expiry_ms = max(self.lease_expiry_ms, sent_ms + self.session_timeout_ms)
        if sent_ms < self._recovering_since_ms:
            self._next_request_ms = now_ms  # sent before the stall: ask again, now
            return
        if self.state is LifecycleState.RECOVERING and self.catch_up_offset is None:
            self.catch_up_offset = metadata_end_offset
        elif fenced and self.state is LifecycleState.RUNNING and (
                self.applied_offset < metadata_end_offset):
            self._recover(now_ms, catch_up_offset=metadata_end_offset)  # fenced while away
        self._maybe_run()

    def on_failed(self, error_code: int | None, now_ms: int) -> None:
        """The registration or heartbeat got no answer, or the controller refused it."""
        self._in_flight = False
        self._next_request_ms = now_ms + RETRY_BACKOFF_MS
        if error_code in (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED):
            self.state = LifecycleState.REGISTERING  # forgotten or replaced: register again
            self.catch_up_offset = None
            self._recovering_since_ms = now_ms

    def on_metadata_applied(self, next_offset: int) -> None:
        """Everything below ``next_offset`` in the metadata log is applied now."""
        assert next_offset >= self.applied_offset, (next_offset, self.applied_offset)
        self.applied_offset = next_offset
        self._maybe_run()

    # == transitions ==============================================================================

    def _check_stall(self, now_ms: int) -> None:
        if now_ms - self._last_poll_ms <= self.stall_ms_max:
            return
        self._last_poll_ms = now_ms  # one stall is counted once
        self.stall_count += 1
        if self.state is LifecycleState.RUNNING:
            self._recover(now_ms, catch_up_offset=None)
        elif self.state is LifecycleState.RECOVERING:
            self.catch_up_offset = None
            self._recovering_since_ms = now_ms
        self._next_request_ms = now_ms  # ask the controller at once

    def _recover(self, now_ms: int, catch_up_offset: int | None) -> None:
        self.state = LifecycleState.RECOVERING
        self.catch_up_offset = catch_up_offset
        self._recovering_since_ms = now_ms if catch_up_offset is None else self._recovering_since_ms
        self._maybe_run()

    def _maybe_run(self) -> None:
        if (self.state is LifecycleState.RECOVERING and self.catch_up_offset is not None
                and self.applied_offset >= self.catch_up_offset):
            self.state = LifecycleState.RUNNING

    def _answered(self, now_ms: int) -> None:
        self._in_flight = False
        self._next_request_ms = now_ms + self.heartbeat_interval_ms
