"""Thin helpers over confluent-kafka and the brokers' introspection endpoint."""

from .groups import groups_frame, lag_frame
from .introspect import events_frame, partitions_frame

__all__ = ["events_frame", "groups_frame", "lag_frame", "partitions_frame"]
