"""Kafka error codes the controller answers with, and the error it raises internally.

The codes the rest of the broker already names come from ``pylog_nb.broker.errors``; the ones
only the controller needs (KRaft's AlterPartition, BrokerRegistration and BrokerHeartbeat) are
defined here until they move there.
"""

from __future__ import annotations

from pylog_nb.broker.errors import (
    FENCED_LEADER_EPOCH,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)

__all__ = [
    "BROKER_ID_NOT_REGISTERED",
    "FENCED_LEADER_EPOCH",
    "INELIGIBLE_REPLICA",
    "INVALID_CONFIG",
    "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR",
    "INVALID_REPLICA_ASSIGNMENT",
    "INVALID_REQUEST",
    "INVALID_TOPIC_EXCEPTION",
    "INVALID_UPDATE_VERSION",
    "NONE",
    "NOT_CONTROLLER",
    "STALE_BROKER_EPOCH",
    "TOPIC_ALREADY_EXISTS",
    "UNKNOWN_TOPIC_ID",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "ControllerError",
]

NOT_CONTROLLER = 41
STALE_BROKER_EPOCH = 77
BROKER_ID_NOT_REGISTERED = 102
INELIGIBLE_REPLICA = 107
INVALID_UPDATE_VERSION = 108


class ControllerError(Exception):
    """A refused controller operation: a Kafka error code and a one-line message."""

    def __init__(self, error_code: int, message: str) -> None:
        assert error_code != NONE, "an error needs a non-zero code"
        super().__init__(message)
        self.error_code = error_code
