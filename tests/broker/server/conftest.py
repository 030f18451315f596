"""Fixtures of the broker's server tests."""

from support.txn_partitions import replicas  # noqa: F401 - a fixture, found by its name
