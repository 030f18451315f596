"""What a broker has moved since it started, under Kafka's metric names (BrokerTopicMetrics).

Counters only: the reader (the live view) turns two readings into a rate. They start at zero
with each broker process, so a reading lower than the one before means a restart.

- ``messages_in``: records appended as leader from producers (MessagesInPerSec)
- ``bytes_in``: bytes of those appends (BytesInPerSec)
- ``bytes_out``: record bytes served to consumers by Fetch (BytesOutPerSec)
- ``replication_bytes_out``: record bytes served to follower replicas (ReplicationBytesOutPerSec)
- ``fetch_requests`` / ``produce_requests``: requests served (TotalFetchRequestsPerSec, ...)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(slots=True)
class BrokerTopicStats:
    """Cumulative traffic counters of one broker process; see the module docstring."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    replication_bytes_out: int = 0
    produce_requests: int = 0
    fetch_requests: int = 0

    def on_append(self, records: int, size_bytes: int) -> None:
        assert records > 0 and size_bytes > 0, (records, size_bytes)
        self.messages_in += records
        self.bytes_in += size_bytes

    def on_fetch(self, size_bytes: int, from_follower: bool) -> None:
        assert size_bytes >= 0, size_bytes
        self.fetch_requests += 1
        if from_follower:
            self.replication_bytes_out += size_bytes
        else:
            self.bytes_out += size_bytes

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)
