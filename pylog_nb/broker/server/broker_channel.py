"""One connection of our own to another broker, for the coordinators' inter-broker requests.

Theory of operation (the part of Kafka's InterBrokerSendThread a lab needs): a channel opens its
connection on first use, sends one request at a time (a lock keeps request and answer paired)
and reads the answer with a timeout. A call that fails in any way closes the connection (a
half-read answer would confuse the next request); the next call opens it again. The
transaction coordinator's WriteTxnMarkers (``txn_marker_channel.py``) and the partition
leaders' AddPartitionsToTxn verification (``add_partitions_manager.py``) share it.

``BrokerChannels`` keeps one channel per peer broker, found in the current metadata image, and
opens a new one when the broker's address changed.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any, Generic, TypeVar

from ..protocol import codec
from ..security.sasl_client import SaslCredentials
from .authentication import authenticate_connection
from .ports import BrokerDirectory

_SIZE = struct.Struct(">i")


class BrokerChannel:
    """One connection to another broker, one request at a time."""

    def __init__(self, address: tuple[str, int], client_id: str,
                 credentials: SaslCredentials | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.client_id = client_id
        self.credentials = credentials  # authenticate each new connection as this principal
        self.ssl_context = ssl_context  # TLS to a peer's SSL / SASL_SSL listener
        self.lock = asyncio.Lock()
        self.correlation_id = 0
        self.connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, api_key: int, version: int, body: dict[str, Any],
                   timeout_s: float) -> Any:
        """Send one request and return the decoded answer; raise (and close) on any failure."""
        async with self.lock:
            try:
                return await self._call(api_key, version, body, timeout_s)
            except BaseException:  # a half-read answer would confuse the next request
                self.close()
                raise

    async def _call(self, api_key: int, version: int, body: dict[str, Any],
                    timeout_s: float) -> Any:
        if self.connection is None:
            self.connection = await asyncio.wait_for(
                asyncio.open_connection(*self.address, ssl=self.ssl_context), timeout_s)
            if self.credentials is not None:
                await authenticate_connection(*self.connection, self.credentials,
                                              self.client_id, timeout_s)
        reader, writer = self.connection
        self.correlation_id += 1
        writer.write(codec.encode_request(api_key, version, self.correlation_id, self.client_id,
                                          body))
        size = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
        frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        correlation_id, response = codec.decode_response(api_key, version, frame)
        assert correlation_id == self.correlation_id, (correlation_id, self.correlation_id)
        return response

    def close(self) -> None:
        if self.connection is not None:
            self.connection[1].close()
            self.connection = None


def live_endpoint(node: BrokerDirectory, broker_id: int) -> dict | None:
    """The endpoint of ``broker_id`` if it is live; None otherwise."""
    if broker_id not in node.live_broker_ids():
        return None
    return next((b for b in node.brokers() if b["node_id"] == broker_id), None)


Channel = TypeVar("Channel", bound=BrokerChannel)


class BrokerChannels(Generic[Channel]):
    """One ``channel_type`` per live peer broker, reopened when the broker's address changed."""

    def __init__(self, node: BrokerDirectory, channel_type: type[Channel], client_id: str
                 ) -> None:
        self.node = node
        self.channel_type = channel_type
        self.client_id = client_id
        self._channels: dict[int, Channel] = {}

    def get(self, broker_id: int) -> Channel | None:
        """The channel to ``broker_id``; None while it is not live."""
        endpoint = live_endpoint(self.node, broker_id)
        if endpoint is None:
            return None
        address = (endpoint["host"], endpoint["port"])
        channel = self._channels.get(broker_id)
        if channel is None or channel.address != address:  # new, or the broker moved
            if channel is not None:
                channel.close()
            channel = self._channels[broker_id] = self.channel_type(
                address, self.client_id, self.node.inter_broker_credentials,
                self.node.inter_broker_ssl)
        return channel

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
