"""One broker's state, assembled: config, metadata, hosted partitions and topic admin."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import BrokerConfig
from .metadata import MetadataStore
from .replica_manager import ReplicaManager, wall_clock_ms
from .topics import TopicAdmin


@dataclass
class BrokerNode:
    """What request handlers see of the broker. The asyncio server owns sockets and timers."""

    config: BrokerConfig
    store: MetadataStore
    replicas: ReplicaManager
    admin: TopicAdmin
    port: int = 0  # the bound port, known once the server listens
    now_ms: object = field(default=wall_clock_ms)

    @classmethod
    def open(cls, config: BrokerConfig) -> BrokerNode:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        store = MetadataStore(config.data_dir)
        replicas = ReplicaManager(config.data_dir, store)
        return cls(config, store, replicas, TopicAdmin(config, replicas), config.port)

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    def brokers(self) -> list[dict]:
        """Broker endpoints for Metadata / DescribeCluster."""
        return [
            {
                "node_id": self.broker_id,
                "broker_id": self.broker_id,
                "host": self.config.host,
                "port": self.port,
                "rack": self.config.rack,
            }
        ]

    def close(self) -> None:
        self.replicas.close()
