"""Cluster metadata as brokers and controllers share it: topic names and topic configs."""
