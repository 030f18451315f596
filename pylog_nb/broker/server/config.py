"""Broker-wide settings, each a named limit with its unit and the reason for its default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..metadata import group_config as g

MIB = 1024 * 1024
REPLICA_LAG_TIME_MAX_MS = 10_000  # Kafka: 30 s; a lab wants to see ISR shrink sooner
# Kafka: 50 partitions; ten keep a laptop cluster light and still spread groups over brokers.
OFFSETS_TOPIC_PARTITIONS = 10
OFFSETS_TOPIC_REPLICATION_FACTOR = 3  # capped at the live brokers when the topic is created
OFFSETS_TOPIC_SEGMENT_BYTES = 100 * MIB  # Kafka's offsets.topic.segment.bytes
# Kafka's broker default is 3 s (a starting fleet forms one generation), but the
# config/server.properties Kafka ships for development sets 0, as a lab wants: a lone consumer
# is assigned at once. --group-initial-rebalance-delay-ms 3000 shows the fleet behaviour.
GROUP_INITIAL_REBALANCE_DELAY_MS = 0
GROUP_CONSUMER_SESSION_TIMEOUT_MS = 45_000  # Kafka's group.consumer.session.timeout.ms
# Kafka: 5 s; a lab wants a rebalance to play out in seconds, each step still visible.
GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS = 1_000  # Kafka's group.consumer.heartbeat.interval.ms
GROUP_CONSUMER_MIGRATION_POLICY = "bidirectional"  # Kafka 4's default
GROUP_CONSUMER_MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")
OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000  # Kafka's offsets.retention.minutes (7 days)
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 60_000  # Kafka: 10 min
# Kafka: 50 partitions; ten are plenty for a lab and still spread coordinators over brokers.
TRANSACTION_STATE_PARTITIONS = 10
TRANSACTION_STATE_REPLICATION_FACTOR = 3  # capped at the live brokers when the topic is created
TRANSACTION_STATE_SEGMENT_BYTES = 100 * MIB  # Kafka's transaction.state.log.segment.bytes
TRANSACTION_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms (15 min)
LOG_CLEANER_BACKOFF_MS = 5_000  # a look for dirty logs; Kafka: 15 s, a lab wants it sooner
PLAINTEXT = "PLAINTEXT"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SSL = "SSL"  # TLS, no SASL: every client is User:ANONYMOUS (Kafka without client certificates)
SASL_SSL = "SASL_SSL"  # SASL inside TLS
SECURITY_PROTOCOLS = (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL)
SASL_PROTOCOLS = frozenset({SASL_PLAINTEXT, SASL_SSL})
TLS_PROTOCOLS = frozenset({SSL, SASL_SSL})
SASL_ENABLED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def parse_controllers(text: str) -> tuple[tuple[str, int], ...]:
    """``host:port[,host:port...]`` (--controller): every controller's RPC address, in id order."""
    return tuple(_host_port(entry) for entry in text.split(","))


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{text.strip()!r} is not host:port")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    data_dir: Path
    host: str = "127.0.0.1"  # loopback unless the user asks otherwise
    port: int = 0  # 0 = pick a free port
    auto_create_topics_enable: bool = True  # like Kafka
    num_partitions: int = 1  # for auto-created topics and CreateTopics with -1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 100 * MIB  # Kafka's socket.request.max.bytes
    fetch_wait_max_ms: int = 30_000  # clamp on a client's max.wait.ms
    retention_check_interval_ms: int = 30_000  # Kafka uses 5 min; notebooks want it sooner
    flush_interval_ms: int = 1_000  # HW/recovery-point checkpoints; data itself is not fsynced
    rack: str | None = None
    # Every controller's (host, port), in controller id order (the first is controller 1).
    # A broker cannot run without them (run_broker refuses an empty tuple).
    controllers: tuple[tuple[str, int], ...] = ()
    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS
    offsets_topic_num_partitions: int = OFFSETS_TOPIC_PARTITIONS
    offsets_topic_replication_factor: int = OFFSETS_TOPIC_REPLICATION_FACTOR
    offsets_topic_segment_bytes: int = OFFSETS_TOPIC_SEGMENT_BYTES
    group_initial_rebalance_delay_ms: int = GROUP_INITIAL_REBALANCE_DELAY_MS
    group_min_session_timeout_ms: int = 6_000  # Kafka's group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # Kafka's group.max.session.timeout.ms
    group_consumer_session_timeout_ms: int = GROUP_CONSUMER_SESSION_TIMEOUT_MS
    group_consumer_heartbeat_interval_ms: int = GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS
    group_share_record_lock_duration_ms: int = 30_000  # Kafka's default, the same name
    group_share_delivery_count_limit: int = 5  # Kafka's default, the same name
    share_auto_offset_reset: str = "latest"  # Kafka's group config default
    share_isolation_level: str = "read_uncommitted"  # Kafka's group config default
    # KIP-848's online upgrade/downgrade between classic and consumer groups (Kafka's
    # group.consumer.migration.policy): disabled, upgrade, downgrade or bidirectional.
    group_consumer_migration_policy: str = GROUP_CONSUMER_MIGRATION_POLICY
    offsets_retention_ms: int = OFFSETS_RETENTION_MS
    offsets_retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS
    log_cleaner_backoff_ms: int = LOG_CLEANER_BACKOFF_MS
    transaction_state_num_partitions: int = TRANSACTION_STATE_PARTITIONS
    transaction_state_replication_factor: int = TRANSACTION_STATE_REPLICATION_FACTOR
    transaction_state_segment_bytes: int = TRANSACTION_STATE_SEGMENT_BYTES
    transaction_max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS
    # KIP-890 part 1 (Kafka 3.6+, default true): a leader asks the transaction coordinator
    # whether a producer's first transactional batch belongs to an ongoing transaction.
    transaction_partition_verification_enable: bool = True
    # The listener's security.protocol: PLAINTEXT or SSL (anyone is User:ANONYMOUS),
    # SASL_PLAINTEXT or SASL_SSL.
    security_protocol: str = PLAINTEXT
    # SSL and SASL_SSL: the listener's certificate and key (PEM), and the CA the broker checks its
    # peers' certificates against on its own connections to them (None: the system's CAs).
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_cafile: Path | None = None
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_ENABLED_MECHANISMS
    connections_max_reauth_ms: int = 0  # KIP-368; 0 (Kafka's default): sessions do not end
    # The cluster's secrets file (security/secrets.py): tokens and the inter-broker principal.
    secrets_file: Path | None = None
    # Kafka's authorizer.class.name set (StandardAuthorizer): every request is checked against
    # the image's ACLs. Off, everything is allowed (Kafka without an authorizer).
    authorizer_enabled: bool = False
    super_users: tuple[str, ...] = ()  # Kafka's super.users: principals every check allows

    def __post_init__(self) -> None:
        assert self.security_protocol in SECURITY_PROTOCOLS, self.security_protocol
        assert self.connections_max_reauth_ms >= 0, self.connections_max_reauth_ms
        if self.tls:
            assert self.ssl_certfile is not None and self.ssl_keyfile is not None, \
                f"{self.security_protocol} needs a certificate and its key"

    @property
    def sasl(self) -> bool:
        """The listener asks for SASL (SASL_PLAINTEXT, SASL_SSL)."""
        return self.security_protocol in SASL_PROTOCOLS

    @property
    def tls(self) -> bool:
        """The listener speaks TLS (SSL, SASL_SSL), and so do the broker's links to its peers."""
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def config_rows(self) -> dict[str, str]:
        """The broker configs DescribeConfigs reports (all read-only)."""
        return {
            "broker.id": str(self.broker_id),
            "log.dirs": str(self.data_dir),
            "auto.create.topics.enable": str(self.auto_create_topics_enable).lower(),
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "socket.request.max.bytes": str(self.socket_request_max_bytes),
            "offsets.topic.num.partitions": str(self.offsets_topic_num_partitions),
            "offsets.topic.replication.factor": str(self.offsets_topic_replication_factor),
            "offsets.topic.segment.bytes": str(self.offsets_topic_segment_bytes),
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "group.min.session.timeout.ms": str(self.group_min_session_timeout_ms),
            "group.max.session.timeout.ms": str(self.group_max_session_timeout_ms),
            "group.consumer.session.timeout.ms": str(self.group_consumer_session_timeout_ms),
            "group.consumer.heartbeat.interval.ms":
                str(self.group_consumer_heartbeat_interval_ms),
            "group.share.record.lock.duration.ms":
                str(self.group_share_record_lock_duration_ms),
            "group.share.delivery.count.limit": str(self.group_share_delivery_count_limit),
            "group.consumer.migration.policy": self.group_consumer_migration_policy,
            "offsets.retention.minutes": str(self.offsets_retention_ms // 60_000),
            "log.cleaner.backoff.ms": str(self.log_cleaner_backoff_ms),
            "transaction.state.log.num.partitions": str(self.transaction_state_num_partitions),
            "transaction.state.log.replication.factor":
                str(self.transaction_state_replication_factor),
            "transaction.state.log.segment.bytes": str(self.transaction_state_segment_bytes),
            "transaction.max.timeout.ms": str(self.transaction_max_timeout_ms),
            "transaction.partition.verification.enable":
                str(self.transaction_partition_verification_enable).lower(),
            "listener.security.protocol.map": f"{self.security_protocol}:{self.security_protocol}",
            "sasl.enabled.mechanisms": ",".join(self.sasl_enabled_mechanisms),
            "ssl.keystore.location": "" if self.ssl_certfile is None else str(self.ssl_certfile),
            "ssl.truststore.location": "" if self.ssl_cafile is None else str(self.ssl_cafile),
            "connections.max.reauth.ms": str(self.connections_max_reauth_ms),
            "authorizer.class.name": (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                if self.authorizer_enabled else ""),
            "super.users": ";".join(self.super_users),
        }


def group_config_defaults(config: BrokerConfig) -> dict[str, str]:
    """The broker-wide default of every group config (metadata/group_config.py): what a group
    without overrides gets, as DescribeConfigs reports it."""
    return {
        g.CONSUMER_SESSION_TIMEOUT_MS: str(config.group_consumer_session_timeout_ms),
        g.CONSUMER_HEARTBEAT_INTERVAL_MS: str(config.group_consumer_heartbeat_interval_ms),
        # Share groups time out and heartbeat as consumer groups do here (Kafka has
        # group.share.session.timeout.ms / heartbeat.interval.ms, with the same defaults).
        g.SHARE_SESSION_TIMEOUT_MS: str(config.group_consumer_session_timeout_ms),
        g.SHARE_HEARTBEAT_INTERVAL_MS: str(config.group_consumer_heartbeat_interval_ms),
        g.SHARE_RECORD_LOCK_DURATION_MS: str(config.group_share_record_lock_duration_ms),
        g.SHARE_AUTO_OFFSET_RESET: config.share_auto_offset_reset,
        g.SHARE_ISOLATION_LEVEL: config.share_isolation_level,
    }
