"""Kafka error codes the replication core answers with, and its one exception type.

The codes are repeated here (not imported from ``broker/errors.py``) so the core stays free of
protocol dependencies, and because two of them (7, 20) are not defined there yet.
"""

from __future__ import annotations

__all__ = [
    "FENCED_LEADER_EPOCH",
    "NONE",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "NOT_LEADER_OR_FOLLOWER",
    "OFFSET_OUT_OF_RANGE",
    "REQUEST_TIMED_OUT",
    "UNKNOWN_LEADER_EPOCH",
    "ReplicationError",
]

NONE = 0
OFFSET_OUT_OF_RANGE = 1
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


class ReplicationError(Exception):
    """A request from the network the core refuses; ``error_code`` goes into the response."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
