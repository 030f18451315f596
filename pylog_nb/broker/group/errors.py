"""Kafka error codes the group coordinator answers with or receives from its shell.

Repeated here (as in ``replication/errors.py``) so the core stays free of protocol imports.
"""

from __future__ import annotations

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_FETCH_SIZE = 4
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
KAFKA_STORAGE_ERROR = 56
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

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
