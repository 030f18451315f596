"""Kafka error codes the group coordinator answers with or receives from its shell.

The codes are the one table's (``pylog_nb.broker.errors``, a leaf module, so the core stays free
of protocol imports), re-exported here under the names the core uses, with Kafka's mapping of a
failed ``__consumer_offsets`` append onto the error a group client sees.
"""

from __future__ import annotations

from pylog_nb.broker.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_COMMIT_OFFSET_SIZE,
    INVALID_FETCH_SIZE,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    KAFKA_STORAGE_ERROR,
    MEMBER_ID_REQUIRED,
    MESSAGE_TOO_LARGE,
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    RECORD_LIST_TOO_LARGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    Errors,
)

STALE_MEMBER_EPOCH = Errors.STALE_MEMBER_EPOCH  # KIP-848: a commit from an old member epoch

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "FENCED_INSTANCE_ID",
    "GROUP_ID_NOT_FOUND",
    "GROUP_MAX_SIZE_REACHED",
    "GROUP_SUBSCRIBED_TO_TOPIC",
    "ILLEGAL_GENERATION",
    "INCONSISTENT_GROUP_PROTOCOL",
    "INVALID_COMMIT_OFFSET_SIZE",
    "INVALID_FETCH_SIZE",
    "INVALID_GROUP_ID",
    "INVALID_SESSION_TIMEOUT",
    "KAFKA_STORAGE_ERROR",
    "MEMBER_ID_REQUIRED",
    "MESSAGE_TOO_LARGE",
    "NONE",
    "NON_EMPTY_GROUP",
    "NOT_COORDINATOR",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "NOT_LEADER_OR_FOLLOWER",
    "OFFSET_METADATA_TOO_LARGE",
    "REBALANCE_IN_PROGRESS",
    "RECORD_LIST_TOO_LARGE",
    "REQUEST_TIMED_OUT",
    "STALE_MEMBER_EPOCH",
    "UNKNOWN_MEMBER_ID",
    "UNKNOWN_SERVER_ERROR",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "group_store_error",
    "offset_store_error",
]

_APPEND_UNAVAILABLE = {
    UNKNOWN_TOPIC_OR_PARTITION,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    REQUEST_TIMED_OUT,
}
_APPEND_MOVED = {NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR}
_APPEND_TOO_LARGE = {MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE}


def group_store_error(append_error: int) -> int:
    """What a JoinGroup/SyncGroup client sees when the ``__consumer_offsets`` append failed.

    Kafka's GroupMetadataManager.storeGroup mapping: the client must rediscover the coordinator.
    """
    if append_error in _APPEND_UNAVAILABLE:
        return COORDINATOR_NOT_AVAILABLE
    if append_error in _APPEND_MOVED:
        return NOT_COORDINATOR
    if append_error in _APPEND_TOO_LARGE:
        return UNKNOWN_SERVER_ERROR
    return append_error


def offset_store_error(append_error: int) -> int:
    """What an OffsetCommit client sees when the append failed (Kafka's storeOffsets)."""
    if append_error in _APPEND_TOO_LARGE:
        return INVALID_COMMIT_OFFSET_SIZE
    return group_store_error(append_error)
