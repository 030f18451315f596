"""Thin helpers over confluent-kafka and the brokers' introspection endpoint.

Each name is imported on first use (``pylog_nb.lazy``): the Spark source's workers import
``client.config`` alone, without pandas.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_MODULES = {
    ".browsing": ("browse",),
    ".group_configs": ("alter_group_configs", "group_configs_frame"),
    ".groups": ("groups_frame", "lag_frame", "members_frame"),
    ".introspect": ("credentials_frame", "events_frame", "partitions_frame", "quorum_frame"),
    ".io": ("LogClientError", "consume", "create_topic", "delete_topic", "produce",
            "topics_frame"),
    ".share_consume": ("consume_share", "read_share"),
    ".shares": ("share_groups_frame", "share_partitions_frame", "share_records_frame"),
    ".txn": ("Transaction", "transaction", "transaction_coordinator"),
}
__all__ = sorted(name for names in _MODULES.values() for name in names)
__getattr__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:
    from .browsing import browse
    from .group_configs import alter_group_configs, group_configs_frame
    from .groups import groups_frame, lag_frame, members_frame
    from .introspect import credentials_frame, events_frame, partitions_frame, quorum_frame
    from .io import LogClientError, consume, create_topic, delete_topic, produce, topics_frame
    from .share_consume import consume_share, read_share
    from .shares import share_groups_frame, share_partitions_frame, share_records_frame
    from .txn import Transaction, transaction, transaction_coordinator
