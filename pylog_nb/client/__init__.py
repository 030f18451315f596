"""Thin helpers over confluent-kafka and the brokers' introspection endpoint."""

from .introspect import partitions_frame

__all__ = ["partitions_frame"]
