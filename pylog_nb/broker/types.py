"""Small value types shared across the broker's packages, defined once below all of them."""

from __future__ import annotations

__all__ = ["TopicPartition"]

TopicPartition = tuple[str, int]  # (topic name, partition index)
