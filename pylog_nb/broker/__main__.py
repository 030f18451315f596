"""``python -m pylog_nb.broker``: run one broker process (LocalCluster starts these)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

# kio registers Hypothesis strategies whenever it can import Hypothesis (half a second of start-up
# in a test environment); a broker process never needs them.
# None in sys.modules blocks the import; typeshed types its values as modules only.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from .process.dirlock import DataDirInUseError, lock_data_dir  # noqa: E402
from .security import secrets  # noqa: E402
from .server.broker import run_broker  # noqa: E402
from .server.config import (  # noqa: E402
    GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_MIGRATION_POLICIES,
    GROUP_CONSUMER_MIGRATION_POLICY,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
    GROUP_INITIAL_REBALANCE_DELAY_MS,
    LOG_CLEANER_BACKOFF_MS,
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    OFFSETS_RETENTION_MS,
    OFFSETS_TOPIC_PARTITIONS,
    OFFSETS_TOPIC_REPLICATION_FACTOR,
    OFFSETS_TOPIC_SEGMENT_BYTES,
    PLAINTEXT,
    REPLICA_LAG_TIME_MAX_MS,
    SECURITY_PROTOCOLS,
    TLS_PROTOCOLS,
    TRANSACTION_MAX_TIMEOUT_MS,
    TRANSACTION_STATE_PARTITIONS,
    TRANSACTION_STATE_REPLICATION_FACTOR,
    BrokerConfig,
    parse_controllers,
)
from .share.share_partition import (  # noqa: E402
    DELIVERY_COUNT_LIMIT_DEFAULT,
    RECORD_LOCK_DURATION_MS_DEFAULT,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pylog_nb.broker")
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--admin-port", type=int, default=0, help="introspection HTTP port")
    parser.add_argument("--ready-fd", type=int, help="write the bound port here once listening")
    parser.add_argument("--parent-fd", type=int, help="shut down when this pipe closes")
    parser.add_argument("--controller", type=_controllers, required=True,
                        help="host:port[,host:port...] of every controller, in id order")
    parser.add_argument("--replica-lag-time-max-ms", type=int, default=REPLICA_LAG_TIME_MAX_MS)
    parser.add_argument("--no-auto-create", action="store_true")
    parser.add_argument("--num-partitions", type=int, default=1,
                        help="partitions of auto-created topics and of CreateTopics with -1 "
                             "(Kafka's num.partitions)")
    parser.add_argument("--default-replication-factor", type=int, default=1,
                        help="replication factor of auto-created topics and of CreateTopics "
                             "with -1 (Kafka's default.replication.factor)")
    parser.add_argument("--offsets-topic-partitions", type=int, default=OFFSETS_TOPIC_PARTITIONS)
    parser.add_argument("--offsets-topic-replication-factor", type=int,
                        default=OFFSETS_TOPIC_REPLICATION_FACTOR)
    parser.add_argument("--offsets-topic-segment-bytes", type=int,
                        default=OFFSETS_TOPIC_SEGMENT_BYTES)
    parser.add_argument("--transaction-state-partitions", type=int,
                        default=TRANSACTION_STATE_PARTITIONS,
                        help="partitions of __transaction_state "
                             "(Kafka's transaction.state.log.num.partitions: 50)")
    parser.add_argument("--transaction-state-replication-factor", type=int,
                        default=TRANSACTION_STATE_REPLICATION_FACTOR)
    parser.add_argument("--transaction-max-timeout-ms", type=int,
                        default=TRANSACTION_MAX_TIMEOUT_MS,
                        help="the longest transaction.timeout.ms a producer may ask for")
    parser.add_argument("--no-transaction-partition-verification", action="store_true",
                        help="append a producer's first transactional batch without asking "
                             "the coordinator (transaction.partition.verification.enable=false)")
    parser.add_argument("--group-initial-rebalance-delay-ms", type=int,
                        default=GROUP_INITIAL_REBALANCE_DELAY_MS,
                        help="hold a new group's first rebalance this long for more joiners "
                             "(Kafka's broker default: 3000)")
    parser.add_argument("--group-min-session-timeout-ms", type=int, default=6_000)
    parser.add_argument("--group-consumer-session-timeout-ms", type=int,
                        default=GROUP_CONSUMER_SESSION_TIMEOUT_MS)
    parser.add_argument("--group-consumer-heartbeat-interval-ms", type=int,
                        default=GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS)
    parser.add_argument("--group-share-record-lock-duration-ms", type=int,
                        default=RECORD_LOCK_DURATION_MS_DEFAULT,
                        help="how long a share consumer holds the records it was given")
    parser.add_argument("--group-share-delivery-count-limit", type=int,
                        default=DELIVERY_COUNT_LIMIT_DEFAULT,
                        help="deliveries of a record before a share group archives it")
    parser.add_argument("--share-auto-offset-reset", choices=("latest", "earliest"),
                        default="latest",
                        help="where a share group starts reading a partition (Kafka's group "
                             "config share.auto.offset.reset, here one value for every group)")
    parser.add_argument("--share-isolation-level", choices=("read_uncommitted",
                                                            "read_committed"),
                        default="read_uncommitted",
                        help="whether share groups see records of open and aborted "
                             "transactions (Kafka's group config share.isolation.level, here "
                             "one value for every group)")
    parser.add_argument("--group-consumer-migration-policy",
                        choices=GROUP_CONSUMER_MIGRATION_POLICIES,
                        default=GROUP_CONSUMER_MIGRATION_POLICY,
                        help="whether a classic group upgrades to a consumer group when a "
                             "consumer-protocol member joins, and back when the last one leaves "
                             "(Kafka's group.consumer.migration.policy)")
    parser.add_argument("--offsets-retention-ms", type=int, default=OFFSETS_RETENTION_MS)
    parser.add_argument("--offsets-retention-check-interval-ms", type=int,
                        default=OFFSETS_RETENTION_CHECK_INTERVAL_MS)
    parser.add_argument("--log-cleaner-backoff-ms", type=int, default=LOG_CLEANER_BACKOFF_MS)
    parser.add_argument("--security-protocol", choices=SECURITY_PROTOCOLS, default=PLAINTEXT,
                        help="the listener's security.protocol")
    parser.add_argument("--ssl-certfile", type=Path,
                        help="SSL, SASL_SSL: the listener's certificate (PEM)")
    parser.add_argument("--ssl-keyfile", type=Path,
                        help="SSL, SASL_SSL: the certificate's private key (PEM)")
    parser.add_argument("--ssl-cafile", type=Path,
                        help="SSL, SASL_SSL: the CA the broker verifies its peers' certificates "
                             "against (default: the system's)")
    parser.add_argument("--secrets", type=Path,
                        help="the cluster's secrets file (tokens, inter-broker principal)")
    parser.add_argument("--authorizer", action="store_true",
                        help="check every request against the cluster's ACLs (Kafka's "
                             "StandardAuthorizer); the secrets file's admin and inter-broker "
                             "principals are super users")
    parser.add_argument("--connections-max-reauth-ms", type=int, default=0,
                        help="KIP-368: a SASL session lasts this long (0: for ever)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.security_protocol in TLS_PROTOCOLS and not (args.ssl_certfile and args.ssl_keyfile):
        parser.error(f"--security-protocol {args.security_protocol} needs --ssl-certfile and "
                     "--ssl-keyfile")
    return args


def _controllers(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_controllers(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _super_users(secrets_file: Path | None) -> tuple[str, ...]:
    """Kafka's super.users: the secrets file's admin and inter-broker principals."""
    if secrets_file is None:
        return ()
    try:
        return secrets.load(secrets_file).super_users
    except secrets.SecretsError as error:
        sys.exit(f"pylog broker: {error}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level,
        format=f"%(asctime)s broker-{args.broker_id} %(levelname)s %(message)s",
    )
    config = BrokerConfig(
        broker_id=args.broker_id,
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        auto_create_topics_enable=not args.no_auto_create,
        num_partitions=args.num_partitions,
        default_replication_factor=args.default_replication_factor,
        controllers=args.controller,
        replica_lag_time_max_ms=args.replica_lag_time_max_ms,
        offsets_topic_num_partitions=args.offsets_topic_partitions,
        offsets_topic_replication_factor=args.offsets_topic_replication_factor,
        offsets_topic_segment_bytes=args.offsets_topic_segment_bytes,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        group_min_session_timeout_ms=args.group_min_session_timeout_ms,
        group_consumer_session_timeout_ms=args.group_consumer_session_timeout_ms,
        group_consumer_heartbeat_interval_ms=args.group_consumer_heartbeat_interval_ms,
        group_share_record_lock_duration_ms=args.group_share_record_lock_duration_ms,
        group_share_delivery_count_limit=args.group_share_delivery_count_limit,
        share_auto_offset_reset=args.share_auto_offset_reset,
        share_isolation_level=args.share_isolation_level,
        group_consumer_migration_policy=args.group_consumer_migration_policy,
        offsets_retention_ms=args.offsets_retention_ms,
        offsets_retention_check_interval_ms=args.offsets_retention_check_interval_ms,
        log_cleaner_backoff_ms=args.log_cleaner_backoff_ms,
        transaction_state_num_partitions=args.transaction_state_partitions,
        transaction_state_replication_factor=args.transaction_state_replication_factor,
        transaction_max_timeout_ms=args.transaction_max_timeout_ms,
        transaction_partition_verification_enable=not args.no_transaction_partition_verification,
        security_protocol=args.security_protocol,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_cafile=args.ssl_cafile,
        secrets_file=args.secrets,
        connections_max_reauth_ms=args.connections_max_reauth_ms,
        authorizer_enabled=args.authorizer,
        super_users=_super_users(args.secrets) if args.authorizer else (),
    )
    try:
        lock_data_dir(args.data_dir)
    except DataDirInUseError as error:
        print(f"pylog broker {args.broker_id}: {error}", file=sys.stderr)
        sys.exit(2)
    asyncio.run(run_broker(config, args.ready_fd, args.parent_fd, args.admin_port))


if __name__ == "__main__":
    main()
