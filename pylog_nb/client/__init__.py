"""Thin helpers over confluent-kafka and the brokers' introspection endpoint."""

from .browse import browse
from .group_configs import alter_group_configs, group_configs_frame
from .groups import groups_frame, lag_frame, members_frame
from .introspect import events_frame, partitions_frame, quorum_frame
from .io import LogClientError, consume, create_topic, delete_topic, produce, topics_frame
from .share_consume import consume_share, read_share
from .shares import share_groups_frame, share_partitions_frame, share_records_frame
from .txn import Transaction, transaction, transaction_coordinator

__all__ = ["LogClientError", "Transaction", "alter_group_configs", "browse", "consume",
           "consume_share", "create_topic", "delete_topic", "events_frame",
           "group_configs_frame", "groups_frame", "lag_frame", "members_frame",
           "partitions_frame", "produce", "quorum_frame", "read_share", "share_groups_frame",
           "share_partitions_frame", "share_records_frame", "topics_frame", "transaction",
           "transaction_coordinator"]
