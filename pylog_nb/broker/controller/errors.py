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
    Errors,
    KafkaError,
)

# Issue 23's codes (the one table has them as Errors members only).
UNSUPPORTED_SASL_MECHANISM = int(Errors.UNSUPPORTED_SASL_MECHANISM)  # 33
SASL_AUTHENTICATION_FAILED = int(Errors.SASL_AUTHENTICATION_FAILED)  # 58
RESOURCE_NOT_FOUND = int(Errors.RESOURCE_NOT_FOUND)  # 91
DUPLICATE_RESOURCE = int(Errors.DUPLICATE_RESOURCE)  # 92
UNACCEPTABLE_CREDENTIAL = int(Errors.UNACCEPTABLE_CREDENTIAL)  # 93

__all__ = [
    "BROKER_ID_NOT_REGISTERED",
    "DUPLICATE_RESOURCE",
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
    "RESOURCE_NOT_FOUND",
    "SASL_AUTHENTICATION_FAILED",
    "STALE_BROKER_EPOCH",
    "TOPIC_ALREADY_EXISTS",
    "UNACCEPTABLE_CREDENTIAL",
    "UNKNOWN_TOPIC_ID",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "UNSUPPORTED_SASL_MECHANISM",
    "ControllerError",
]


class ControllerError(KafkaError):
    """A refused controller operation: a Kafka error code and a one-line message."""

    def __init__(self, error_code: int, message: str) -> None:
        assert error_code != NONE, "an error needs a non-zero code"
        super().__init__(message)
        self.error_code = error_code
