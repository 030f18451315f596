"""Kafka error codes by name, and the mapping from exceptions raised by the cores to them."""

from __future__ import annotations

import logging

from .records.header import InvalidRecordError

log = logging.getLogger("pylog.broker")

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
FETCH_SESSION_ID_NOT_FOUND = 70
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78
UNKNOWN_TOPIC_ID = 100


def error_code_of(error: BaseException) -> int:
    """The Kafka error code for an exception; unexpected ones are logged and become -1."""
    code = getattr(error, "error_code", None)
    if code is not None:
        return int(code)
    if isinstance(error, InvalidRecordError):
        return CORRUPT_MESSAGE
    log.exception("unexpected error: %s", error)
    return UNKNOWN_SERVER_ERROR


def error_name(code: int) -> str:
    from kio.schema.errors import ErrorCode  # here: kio is heavy, the controller never needs it

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)
