"""The API keys and versions this broker serves, and the ranges it advertises.

``min_advertised`` can sit below ``min_parsed``: librdkafka before 2.11.1 (Debian's kcat 1.7.1)
checks that the advertised range *contains* version 0 of Produce, Fetch, ListOffsets,
FindCoordinator and InitProducerId before it enables compression and RecordBatch v2 (KAFKA-18659).
A request for a version below ``min_parsed`` is answered with UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiRange:
    min_advertised: int
    min_parsed: int
    max: int


PRODUCE_KEY = 0
FETCH_KEY = 1
LIST_OFFSETS_KEY = 2
METADATA_KEY = 3
OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
FIND_COORDINATOR_KEY = 10
JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
SASL_HANDSHAKE_KEY = 17
API_VERSIONS_KEY = 18
CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
DELETE_RECORDS_KEY = 21
INIT_PRODUCER_ID_KEY = 22
OFFSET_FOR_LEADER_EPOCH_KEY = 23
ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
WRITE_TXN_MARKERS_KEY = 27
TXN_OFFSET_COMMIT_KEY = 28
DESCRIBE_CONFIGS_KEY = 32
DELETE_GROUPS_KEY = 42
OFFSET_DELETE_KEY = 47
ALTER_CONFIGS_KEY = 33
CREATE_PARTITIONS_KEY = 37
INCREMENTAL_ALTER_CONFIGS_KEY = 44
SASL_AUTHENTICATE_KEY = 36
DESCRIBE_CLUSTER_KEY = 60
DESCRIBE_TRANSACTIONS_KEY = 65
LIST_TRANSACTIONS_KEY = 66
CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
SHARE_GROUP_HEARTBEAT_KEY = 76
SHARE_GROUP_DESCRIBE_KEY = 77
SHARE_FETCH_KEY = 78
SHARE_ACKNOWLEDGE_KEY = 79
INITIALIZE_SHARE_GROUP_STATE_KEY = 83
READ_SHARE_GROUP_STATE_KEY = 84
WRITE_SHARE_GROUP_STATE_KEY = 85
DELETE_SHARE_GROUP_STATE_KEY = 86
READ_SHARE_GROUP_STATE_SUMMARY_KEY = 87
DESCRIBE_SHARE_GROUP_OFFSETS_KEY = 90
ALTER_SHARE_GROUP_OFFSETS_KEY = 91
DELETE_SHARE_GROUP_OFFSETS_KEY = 92
DESCRIBE_ACLS_KEY = 29
CREATE_ACLS_KEY = 30
DELETE_ACLS_KEY = 31
DESCRIBE_CLIENT_QUOTAS_KEY = 48
ALTER_CLIENT_QUOTAS_KEY = 49
DESCRIBE_USER_SCRAM_CREDENTIALS_KEY = 50
ALTER_USER_SCRAM_CREDENTIALS_KEY = 51

API_VERSIONS: dict[int, ApiRange] = {
    PRODUCE_KEY: ApiRange(0, 3, 10),
    FETCH_KEY: ApiRange(0, 4, 16),
    LIST_OFFSETS_KEY: ApiRange(0, 1, 7),
    METADATA_KEY: ApiRange(0, 0, 12),
    # OffsetCommit/OffsetFetch v10 name topics by id (KIP-848 era); v9 is the last by name.
    OFFSET_COMMIT_KEY: ApiRange(2, 2, 9),
    OFFSET_FETCH_KEY: ApiRange(1, 1, 9),
    FIND_COORDINATOR_KEY: ApiRange(0, 0, 6),
    JOIN_GROUP_KEY: ApiRange(0, 0, 9),
    HEARTBEAT_KEY: ApiRange(0, 0, 4),
    LEAVE_GROUP_KEY: ApiRange(0, 0, 5),
    SYNC_GROUP_KEY: ApiRange(0, 0, 5),
    DESCRIBE_GROUPS_KEY: ApiRange(0, 0, 6),
    LIST_GROUPS_KEY: ApiRange(0, 0, 5),
    DELETE_GROUPS_KEY: ApiRange(0, 0, 2),
    OFFSET_DELETE_KEY: ApiRange(0, 0, 0),
    API_VERSIONS_KEY: ApiRange(0, 0, 4),
    SASL_HANDSHAKE_KEY: ApiRange(0, 0, 1),
    SASL_AUTHENTICATE_KEY: ApiRange(0, 0, 2),
    CREATE_TOPICS_KEY: ApiRange(2, 2, 7),
    DELETE_TOPICS_KEY: ApiRange(1, 1, 6),
    DELETE_RECORDS_KEY: ApiRange(0, 0, 2),
    INIT_PRODUCER_ID_KEY: ApiRange(0, 0, 4),
    OFFSET_FOR_LEADER_EPOCH_KEY: ApiRange(2, 2, 4),
    # Transactions, version 1 (KIP-98/360/588). The versions after these (AddPartitionsToTxn
    # v5, AddOffsetsToTxn v4, EndTxn v5, InitProducerId v5) belong to transaction version 2
    # (KIP-890 part 2: the epoch bumped on every commit), which this broker does not do.
    ADD_PARTITIONS_TO_TXN_KEY: ApiRange(0, 0, 4),
    ADD_OFFSETS_TO_TXN_KEY: ApiRange(0, 0, 3),
    END_TXN_KEY: ApiRange(0, 0, 3),
    WRITE_TXN_MARKERS_KEY: ApiRange(1, 1, 2),  # Kafka 4 removed v0; brokers send it, not clients
    DESCRIBE_TRANSACTIONS_KEY: ApiRange(0, 0, 0),
    LIST_TRANSACTIONS_KEY: ApiRange(0, 0, 1),
    # v3 adds KIP-447's group fields (what librdkafka and Java 2.5-3.x send); v4 is KIP-890.
    TXN_OFFSET_COMMIT_KEY: ApiRange(0, 0, 3),
    DESCRIBE_CONFIGS_KEY: ApiRange(1, 1, 4),
    ALTER_CONFIGS_KEY: ApiRange(0, 0, 2),
    CREATE_PARTITIONS_KEY: ApiRange(0, 0, 3),
    INCREMENTAL_ALTER_CONFIGS_KEY: ApiRange(0, 0, 1),
    DESCRIBE_CLUSTER_KEY: ApiRange(0, 0, 1),
    # KIP-848. v1 (KIP-1082): the member id is the client's own, sent on its first heartbeat.
    CONSUMER_GROUP_HEARTBEAT_KEY: ApiRange(0, 0, 1),
    CONSUMER_GROUP_DESCRIBE_KEY: ApiRange(0, 0, 1),
    # KIP-932 share groups, v1: the first version Kafka 4.1 made generally available.
    SHARE_GROUP_HEARTBEAT_KEY: ApiRange(1, 1, 1),
    SHARE_GROUP_DESCRIBE_KEY: ApiRange(1, 1, 1),
    SHARE_FETCH_KEY: ApiRange(1, 1, 1),
    SHARE_ACKNOWLEDGE_KEY: ApiRange(1, 1, 1),
    # The share coordinator's, sent by partition leaders (inter-broker).
    INITIALIZE_SHARE_GROUP_STATE_KEY: ApiRange(0, 0, 0),
    READ_SHARE_GROUP_STATE_KEY: ApiRange(0, 0, 0),
    WRITE_SHARE_GROUP_STATE_KEY: ApiRange(0, 0, 0),
    DELETE_SHARE_GROUP_STATE_KEY: ApiRange(0, 0, 0),
    READ_SHARE_GROUP_STATE_SUMMARY_KEY: ApiRange(0, 0, 0),
    # An admin's view of a share group's start offsets; Describe v1 (KIP-1226) adds the lag.
    DESCRIBE_SHARE_GROUP_OFFSETS_KEY: ApiRange(0, 0, 1),
    ALTER_SHARE_GROUP_OFFSETS_KEY: ApiRange(0, 0, 0),
    DELETE_SHARE_GROUP_OFFSETS_KEY: ApiRange(0, 0, 0),
    # Security admin (issue 23). The ACL APIs from v1 (KIP-290's pattern types; kio has no v0
    # schema): librdkafka and kafka-python send v1.
    DESCRIBE_ACLS_KEY: ApiRange(1, 1, 3),
    CREATE_ACLS_KEY: ApiRange(1, 1, 3),
    DELETE_ACLS_KEY: ApiRange(1, 1, 3),
    DESCRIBE_CLIENT_QUOTAS_KEY: ApiRange(0, 0, 1),
    ALTER_CLIENT_QUOTAS_KEY: ApiRange(0, 0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: ApiRange(0, 0, 0),
    ALTER_USER_SCRAM_CREDENTIALS_KEY: ApiRange(0, 0, 0),
}
