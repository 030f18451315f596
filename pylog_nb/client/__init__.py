"""Thin helpers over confluent-kafka and the brokers' introspection endpoint."""

from .introspect import events_frame, partitions_frame

__all__ = ["events_frame", "partitions_frame"]
