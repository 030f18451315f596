"""The sans-IO controller core: metadata records, the metadata log, the cluster image, decisions.

Layout (one concern per module):

- ``records``: metadata record types and their JSON form;
- ``image``: ClusterImage and ``apply``/``replay``, the fold of records;
- ``log``: MetadataLog, the CRC-checked, fsynced, torn-tail-recovering file of record batches;
- ``placement``: Kafka's replica assignment;
- ``election``: leader election and ISR changes as pure functions;
- ``topic_control`` / ``partition_control``: admin and AlterPartition checks, Kafka error codes;
- ``events``: human-readable events derived from records;
- ``controller``: Controller, which ties them together with leases and an injected clock;
- ``quorum``: QuorumController, one voter of the Raft quorum (``..raft``): the committed image on
  every voter, and the Controller on the active one.
"""

from ..metadata.image import BrokerImage, ClusterImage, PartitionImage, TopicImage, apply, replay
from ..metadata.records import (
    NO_LEADER,
    ConfigChange,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataRecord,
    MetadataRecordError,
    PartitionChange,
    ProducerIdsBlock,
    RegisterBroker,
    UnfenceBroker,
    record_from_json,
)
from .controller import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    PRODUCER_ID_BLOCK_SIZE,
    Controller,
    ControllerResult,
)
from .errors import ControllerError
from .events import EVENTS_MAX, ControllerEvent
from .log import MetadataLog
from .topic_control import TopicDefaults

__all__ = [
    "BROKER_HEARTBEAT_INTERVAL_MS",
    "BROKER_SESSION_TIMEOUT_MS",
    "EVENTS_MAX",
    "NO_LEADER",
    "PRODUCER_ID_BLOCK_SIZE",
    "BrokerImage",
    "ClusterImage",
    "ConfigChange",
    "Controller",
    "ControllerError",
    "ControllerEvent",
    "ControllerResult",
    "CreatePartition",
    "CreateTopic",
    "DeleteTopic",
    "FenceBroker",
    "MetadataLog",
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionChange",
    "PartitionImage",
    "ProducerIdsBlock",
    "RegisterBroker",
    "TopicDefaults",
    "TopicImage",
    "UnfenceBroker",
    "apply",
    "record_from_json",
    "replay",
]
