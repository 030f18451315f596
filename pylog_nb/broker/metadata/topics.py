"""Kafka's rules for topic names, shared by the controller (which decides) and the brokers.

The metadata itself has one type, ``image.ClusterImage``: the controllers fold their committed
log into it and every broker folds the same records (``follower``), whatever the size of the
cluster.
"""

from __future__ import annotations

import re

from ..errors import Errors, KafkaError

TOPIC_NAME_LENGTH_MAX = 249  # Kafka's limit, so that "<topic>-<partition>" fits a file name
PARTITIONS_MAX = 10_000  # per topic: a named bound on directories one request can create
_TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPIC_PREFIX = "__"
OFFSETS_TOPIC = "__consumer_offsets"  # committed offsets and group metadata (Kafka's name)
TRANSACTION_STATE_TOPIC = "__transaction_state"  # the transaction coordinators' log (Kafka's)
SHARE_GROUP_STATE_TOPIC = "__share_group_state"  # the share coordinators' log (Kafka's, KIP-932)
# Written by coordinators only: a client's Produce to them is refused.
COORDINATOR_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})


class InvalidTopicError(KafkaError, ValueError):
    error_code = Errors.INVALID_TOPIC_EXCEPTION


def check_topic_name(name: str | None) -> str:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if not name:
        raise InvalidTopicError("Topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name '{name}' is not allowed")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(f"Topic name is longer than {TOPIC_NAME_LENGTH_MAX} characters")
    if not _TOPIC_NAME_RE.match(name):
        raise InvalidTopicError(
            f"Topic name '{name}' has characters other than ASCII letters, digits, '.', '_', '-'"
        )
    return name

