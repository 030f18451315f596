"""What the broker's parts need of the broker around them, as narrow structural ports.

The transaction coordinator's shell, its marker channel, the leaders' AddPartitionsToTxn
verification, the inter-broker channels and the controller admin used to take the whole
``BrokerNode`` (or ``ClusterLink``) and import it, which made ``server/`` one import cycle: the
node builds them, they import the node. Each now names, as a ``typing.Protocol``, exactly what it
uses; ``BrokerNode`` and ``ClusterLink`` satisfy these structurally (mypy checks it where they
pass themselves in) and import none of it.

This module sits below everything in ``server/`` that uses it: it imports only the sans-IO
packages, ``server/config.py`` and ``server/pending.py``.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..metadata.image import ClusterImage, TopicImage
from ..security.sasl_client import SaslCredentials
from ..txn import Action as TxnAction
from ..txn import (
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    EndTxnAnswer,
    InitProducerIdAnswer,
    TransactionCoordinator,
)
from .config import BrokerConfig
from .pending import Pending

__all__ = [
    "AdminBroker",
    "BrokerDirectory",
    "ClusterView",
    "ControllerLink",
    "TopicCreator",
    "TxnAnswer",
    "TxnAsker",
    "TxnCoordinatorHost",
    "TxnVerifierHost",
]

# What a transaction coordinator request waits for (TxnCoordinatorRuntime.ask).
TxnAnswer = InitProducerIdAnswer | AddPartitionsAnswer | AddOffsetsAnswer | EndTxnAnswer


class BrokerDirectory(Protocol):
    """The registered brokers and which are live (``broker_channel.py``)."""

    def live_broker_ids(self) -> list[int]: ...

    def brokers(self) -> list[dict]: ...

    @property
    def inter_broker_credentials(self) -> SaslCredentials | None:
        """What our connections to peers authenticate as (None: a PLAINTEXT cluster)."""
        ...

    @property
    def inter_broker_ssl(self) -> ssl.SSLContext | None:
        """The TLS context of our connections to peers (None: they listen without TLS)."""
        ...


class ClusterView(BrokerDirectory, Protocol):
    """Who this broker is, the metadata image it serves, and whether it is cut off from its peers
    (``txn_marker_channel.py``)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def image(self) -> ClusterImage: ...

    @property
    def isolated(self) -> bool: ...


class TopicCreator(Protocol):
    """Topic creation through the active controller (``ControllerAdmin``)."""

    async def create_topic(self, name: str, *, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str | None]) -> TopicImage: ...


class ShareStateHost(ClusterView, Protocol):
    """What the share coordinators' shell uses of its broker (``share_state_service.py``)."""

    def topic_admin(self) -> TopicCreator: ...


class TxnCoordinatorHost(ClusterView, Protocol):
    """What the transaction coordinator's shell uses of its broker (``txn_coordinator.py``)."""

    @property
    def config(self) -> BrokerConfig: ...

    def topic_admin(self) -> TopicCreator: ...

    async def allocate_producer_id(self) -> int: ...


class TxnAsker(Protocol):
    """The transaction coordinator core and a way to await its answer (``TransactionService``)."""

    @property
    def core(self) -> TransactionCoordinator: ...

    def ask(self, call: Callable[[int], list[TxnAction]]) -> Pending[TxnAnswer | None]: ...


class TxnVerifierHost(ClusterView, Protocol):
    """What the leaders' transaction verification uses of its broker
    (``add_partitions_manager.py``)."""

    @property
    def now_ms(self) -> Callable[[], int]: ...

    @property
    def txns(self) -> TxnAsker: ...


class AdminBroker(Protocol):
    """The broker's image and config, as the controller admin reads them."""

    @property
    def image(self) -> ClusterImage: ...

    @property
    def config(self) -> BrokerConfig: ...


class ControllerLink(Protocol):
    """Calls to the active controller, answered once this broker applied what they wrote
    (``ClusterLink``; ``controller_admin.py``)."""

    @property
    def node(self) -> AdminBroker: ...

    async def call(self, method: str, **params: Any) -> dict: ...
