"""Kafka error codes the controller answers with, and the error it raises internally.

The codes are the one table's (``pylog_nb.broker.errors``), re-exported here under the names the
controller uses, KRaft's AlterPartition, BrokerRegistration and BrokerHeartbeat codes included.
"""

from __future__ import annotations

from pylog_nb.broker.errors import (
    BROKER_ID_NOT_REGISTERED,
    FENCED_LEADER_EPOCH,
    INELIGIBLE_REPLICA,
    INVALID_CONFIG,
    INVALID_GROUP_ID,
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    INVALID_UPDATE_VERSION,
    NONE,
    NOT_CONTROLLER,
    STALE_BROKER_EPOCH,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaError,
)

__all__ = [
    "BROKER_ID_NOT_REGISTERED",
    "FENCED_LEADER_EPOCH",
    "INELIGIBLE_REPLICA",
    "INVALID_CONFIG",
    "INVALID_GROUP_ID",
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


class ControllerError(KafkaError):
    """A refused controller operation: a Kafka error code and a one-line message."""

    def __init__(self, error_code: int, message: str) -> None:
        assert error_code != NONE, "an error needs a non-zero code"
        super().__init__(message)
        self.error_code = error_code
