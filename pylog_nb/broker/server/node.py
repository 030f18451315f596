"""One broker's parts, assembled for the asyncio shell: what the request handlers are given.

Theory of operation: ``BrokerNode`` is the composition root of a broker process. It builds the
sans-IO ``BrokerCore`` (``core.py``: the replication parts, the one interpreter of their actions,
the link logic) and is the shell the core reports to: its calls leave through the ``ClusterLink``
(sockets to the controllers and the leaders), markers and producer ids go through the
``TransactionService``, a partition's transaction verification through the
``AddPartitionsToTxnManager``, and the core's timers run on the event loop.

Every broker, however small the cluster, serves the image its controllers
committed (``image``): there is no metadata a broker decides on its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..controller.rpc import Address
from ..metadata.image import ClusterImage
from ..replication.actions import Action, RoleChanged
from ..security import secrets, tls
from ..security.sasl import SCRAM_MECHANISMS, CredentialStore, ScramCredential, scram_credential
from ..security.sasl_client import SaslCredentials
from ..txn import WriteTxnMarkers
from ..types import TopicPartition
from .add_partitions_manager import AddPartitionsToTxnManager
from .authentication import ConnectionAuthentication
from .bridge import pending_of
from .cluster_link import ClusterLink
from .config import BrokerConfig
from .connections import ConnectionTable
from .controller_admin import ControllerAdmin
from .core import BrokerCore, Outbound
from .group_coordinator import GroupService
from .pending import Pending
from .purgatory import ProducePurgatory
from .replica_manager import (
    Partition,
    ReplicaManager,
    wall_clock_ms,
)
from .share_state_service import ShareStateService
from .txn_coordinator import TransactionService

FENCED_BROKER_LISTED_MS = 5_000  # a fenced broker stays in Metadata this long (see brokers())
# The client address of the connection a handler serves ("/127.0.0.1", as Kafka reports it).
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
CLUSTER_ID = "pylog-local-cluster"  # what Metadata and DescribeCluster report


@dataclass(frozen=True, slots=True)
class _AdminLink:
    """What the ControllerAdmin uses: this broker and its calls to the active controller."""

    node: BrokerNode
    link: ClusterLink

    async def call(self, method: str, **params) -> dict:
        return await self.link.call(method, **params)


def _static_credentials(cluster_secrets: secrets.ClusterSecrets | None
                        ) -> dict[tuple[str, str], ScramCredential]:
    if cluster_secrets is None:
        return {}
    return {(user, mechanism): scram_credential(mechanism, password)
            for user, password in cluster_secrets.users.items() for mechanism in SCRAM_MECHANISMS}


class BrokerNode:
    """What request handlers see of the broker. The asyncio server owns sockets and timers."""

    def __init__(self, config: BrokerConfig, controllers: Sequence[Address] | None = None,
                 *, now_ms=wall_clock_ms) -> None:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.now_ms = now_ms
        self.port = config.port  # the bound port, known once the server listens
        self.secrets = None if config.secrets_file is None else secrets.load(config.secrets_file)
        self._static_credentials = _static_credentials(self.secrets)
        # TLS listeners (SSL, SASL_SSL): the listener's context, and the one of this broker's
        # own connections to its peers, which listen the same way.
        self.server_ssl: ssl.SSLContext | None = None
        self.inter_broker_ssl: ssl.SSLContext | None = None
        if config.tls:
            assert config.ssl_certfile is not None and config.ssl_keyfile is not None
            self.server_ssl = tls.server_context(config.ssl_certfile, config.ssl_keyfile)
            self.inter_broker_ssl = tls.client_context(config.ssl_cafile)
        self.credentials = CredentialStore(self._scram_credential)
        self.isolated = False  # fault injection: cut off from peers and controller, not clients
        # who is connected now (GET /v1/connections); the network shell keeps it up to date
        self.client_connections = ConnectionTable(
            None if self.secrets is None else f"User:{self.secrets.inter_broker_user}")
        self.core = BrokerCore(config.broker_id, config.data_dir, self, now_ms=now_ms,
                               incarnation_id=uuid.uuid4().hex,
                               replica_lag_time_max_ms=config.replica_lag_time_max_ms,
                               config=config)
        self.link = ClusterLink(
            self.core, config.controllers if controllers is None else controllers,
            host=config.host, port=lambda: self.port, isolated=lambda: self.isolated,
            credentials=self.inter_broker_credentials, ssl_context=self.inter_broker_ssl,
            token=None if self.secrets is None else self.secrets.internal_token)
        self.admin = ControllerAdmin(_AdminLink(self, self.link))
        self._fenced_since_ms: dict[int, int] = {}  # first reported fenced
        self.groups = GroupService(
            config, self.core.groups, metadata=lambda: self.image, endpoints=self.brokers,
            live_broker_ids=self.live_broker_ids, admin=self.topic_admin)
        self.txns = TransactionService(self, self.core.txns)
        self.add_partitions = AddPartitionsToTxnManager(self)
        self.share_state = ShareStateService(self)

    @classmethod
    def open(cls, config: BrokerConfig, controllers: Sequence[Address] | None = None
             ) -> BrokerNode:
        """The node of ``config``, linked to ``controllers`` (default: the config's)."""
        return cls(config, controllers)

    # == who connects ============================================================================

    def new_authentication(self) -> ConnectionAuthentication:
        """The authentication state of a new client connection."""
        # PLAINTEXT and SSL: no mechanisms, every connection is User:ANONYMOUS
        return ConnectionAuthentication(
            self.config.sasl_enabled_mechanisms if self.config.sasl else (),
            lambda: self.credentials,
            reauth_ms=self.config.connections_max_reauth_ms, now_ms=self.now_ms)

    @property
    def inter_broker_credentials(self) -> SaslCredentials | None:
        """What this broker's own connections to its peers authenticate as (None: nothing)."""
        if not self.config.sasl or self.secrets is None:
            return None
        return SaslCredentials(self.secrets.inter_broker_user, self.secrets.inter_broker_password)

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential in the metadata log; for a user of the secrets file, the one
        derived at start-up until the log has one (brokers authenticate each other before
        they have caught up with the metadata)."""
        credential = self.image.scram_credentials.get((user, mechanism))
        return credential or self._static_credentials.get((user, mechanism))

    # == the core's parts, as the handlers use them ===============================================

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def replicas(self) -> ReplicaManager:
        return self.core.replicas

    @property
    def image(self) -> ClusterImage:
        """The image the controllers committed, as this broker last published it."""
        return self.core.image

    @property
    def events(self) -> deque:
        return self.core.events

    @property
    def purgatory(self) -> ProducePurgatory:
        return self.core.purgatory

    def lifecycle_view(self) -> dict:
        return self.core.lifecycle.snapshot()

    def topic_admin(self) -> ControllerAdmin:
        return self.admin

    def publish(self, image: ClusterImage) -> None:
        self.core.publish(image)

    def on_actions(self, actions: list[Action]) -> None:
        self.core.on_actions(actions)

    def brokers(self) -> list[dict]:
        """Broker endpoints for Metadata / DescribeCluster: the registered brokers.

        A fenced broker stays listed for ``FENCED_BROKER_LISTED_MS`` after we first report it
        fenced: librdkafka forgets the partitions a vanished broker led and waits a whole
        metadata refresh before using their new leaders. Then it goes, as in Kafka, so requests
        sent to every broker (ListGroups) do not wait on a dead one.
        """
        endpoints = [self.image.brokers[b] for b in sorted(self.image.brokers)]
        if not endpoints:  # no metadata yet: a client may still learn where we are
            return [self._endpoint(self.broker_id, self.config.host, self.port)]
        now_ms = self.now_ms()
        fenced = {b.broker_id for b in endpoints if b.fenced}
        self._fenced_since_ms = {broker_id: self._fenced_since_ms.get(broker_id, now_ms)
                                 for broker_id in fenced}
        return [self._endpoint(b.broker_id, b.host, b.port) for b in endpoints
                if not b.fenced or now_ms - self._fenced_since_ms[b.broker_id]
                < FENCED_BROKER_LISTED_MS]

    def live_broker_ids(self) -> list[int]:
        return list(self.image.live_broker_ids())

    def _endpoint(self, broker_id: int, host: str, port: int) -> dict:
        return {"node_id": broker_id, "broker_id": broker_id, "host": host, "port": port,
                "rack": self.config.rack}

    @property
    def controller_id(self) -> int:
        """What Metadata reports as controller: clients only send admin requests there, and any
        live broker forwards them to the active controller, so the lowest live broker id (as
        Kafka reports a random live broker under KRaft)."""
        return min(self.image.live_broker_ids() or [self.broker_id])

    async def allocate_producer_id(self) -> int:
        return await self.link.allocate_producer_id()

    # == the core's shell =========================================================================

    def send(self, outbound: Outbound) -> None:
        self.link.send(outbound)

    def role_changed(self, action: RoleChanged, partition: Partition | None) -> None:
        pass  # the coordinators follow their partitions in the core

    def send_markers(self, action: WriteTxnMarkers) -> None:
        self.txns.send_markers(action)

    def refill_producer_ids(self) -> None:
        self.txns.refill_producer_ids()

    def request_producer_id(self) -> Pending[int]:
        return pending_of(self.allocate_producer_id())

    def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: list[TopicPartition]) -> Pending[dict[TopicPartition, int]]:
        return pending_of(self.add_partitions.verify_transaction(
            transactional_id, producer_id, producer_epoch, partitions))

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Callable[[], None]:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback).cancel

    def call_broker(self, broker_id: int, api_key: int, version: int,
                    body: dict) -> Pending[Any]:
        return pending_of(self.share_state.call(broker_id, api_key, version, body))

    def ensure_share_state_topic(self) -> None:
        self.share_state.ensure_topic()

    def close(self) -> None:
        self.groups.close()
        self.txns.close()
        self.add_partitions.close()
        self.share_state.close()
        self.core.close()
