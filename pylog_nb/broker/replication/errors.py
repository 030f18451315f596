"""The Kafka error codes the replication core answers with, and its one exception type.

The codes are the one table's (``pylog_nb.broker.errors``, a leaf module, so the core stays free
of protocol dependencies); they are re-exported here under the names the core uses.
"""

from __future__ import annotations

from pylog_nb.broker.errors import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
    KafkaError,
)

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


class ReplicationError(KafkaError):
    """A request from the network the core refuses; ``error_code`` goes into the response."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
