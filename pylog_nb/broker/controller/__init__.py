"""The sans-IO controller core: decisions and the quorum voter, over the metadata model of
``..metadata`` (records, ClusterImage and its fold), re-exported here.

Layout (one concern per module):

- ``placement``: Kafka's replica assignment;
- ``election``: leader election and ISR changes as pure functions;
- ``topic_control`` / ``partition_control``: admin and AlterPartition checks, Kafka error codes;
- ``security_control``: SCRAM credentials, ACLs and client quotas, per-item Kafka error codes;
- ``auth``: the internal token every connection to a controller presents first (``--secrets``);
- ``events``: human-readable events derived from committed records;
- ``controller``: Controller, the active controller's decisions, with leases and an injected
  clock, appending to a Journal;
- ``quorum``: QuorumController, one voter of the Raft quorum (``..raft``): the metadata log is
  the Raft log (durability, commit, replay on restart), the committed image and events on every
  voter, and the Controller on the active one;
- ``server``: the asyncio shell serving the controller RPC (``rpc``).
"""

from ..metadata.image import BrokerImage, ClusterImage, PartitionImage, TopicImage, apply, replay
from ..metadata.records import (
    NO_LEADER,
    AccessControlEntry,
    ClientQuota,
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
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UnfenceBroker,
    UserScramCredential,
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
from .topic_control import TopicDefaults

__all__ = [
    "BROKER_HEARTBEAT_INTERVAL_MS",
    "BROKER_SESSION_TIMEOUT_MS",
    "EVENTS_MAX",
    "NO_LEADER",
    "PRODUCER_ID_BLOCK_SIZE",
    "AccessControlEntry",
    "BrokerImage",
    "ClientQuota",
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
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionChange",
    "PartitionImage",
    "ProducerIdsBlock",
    "RegisterBroker",
    "RemoveAccessControlEntry",
    "RemoveUserScramCredential",
    "TopicDefaults",
    "TopicImage",
    "UnfenceBroker",
    "UserScramCredential",
    "apply",
    "record_from_json",
    "replay",
]
