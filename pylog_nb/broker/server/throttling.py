"""Client quotas on one broker's connections (Kafka's ClientQuotaManager, KIP-219's muting).

Theory of operation: the byte rates of the metadata image's client quotas
(``producer_byte_rate``, ``consumer_byte_rate`` per user and client id, with Kafka's defaults
and precedence: ``security/quotas.py``) are measured per (principal, client id) over Kafka's
window of 11 one-second samples. A Produce request counts its size when it arrives, a consumer's
Fetch response its size when it leaves (a follower's replica fetches are the cluster's own
traffic, not a client's). A client over its quota is answered at once with the
``throttle_time_ms`` that brings it back under, and its connection is muted for that long: the
broker reads nothing more from it until then (KIP-219), whether or not the client honours it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..metadata.image import ClusterImage
from ..protocol.fetch_response import FileRange
from ..protocol.versions import FETCH_KEY
from ..security.quotas import ClientQuotas

_I32 = struct.Struct(">i")
FETCH_FLEXIBLE_VERSION = 12  # Fetch responses from v12 carry a tagged-fields byte in the header


@dataclass
class Mute:
    """One connection's muting: it reads nothing before ``until_ms``."""

    until_ms: int = 0

    def extend(self, now_ms: int, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.until_ms = max(self.until_ms, now_ms + throttle_ms)


class Throttler:
    """The broker's client quotas, following the image it serves."""

    def __init__(self) -> None:
        self.quotas = ClientQuotas()
        self._applied: object = None  # the image's client_quotas last applied

    def follow(self, image: ClusterImage) -> None:
        if image.client_quotas is not self._applied:
            self._applied = image.client_quotas
            self.quotas.update(image.client_quotas)  # type: ignore[arg-type]

    def on_produce(self, principal: str, client_id: str | None, size_bytes: int,
                   now_ms: int) -> int:
        """A Produce request of ``size_bytes`` arrived: its throttle time."""
        return self.quotas.produce.record(principal, client_id or "", size_bytes, now_ms)

    def on_fetch_response(self, principal: str, client_id: str | None, size_bytes: int,
                          now_ms: int) -> int:
        """A consumer's Fetch response of ``size_bytes`` leaves: its throttle time."""
        return self.quotas.fetch.record(principal, client_id or "", size_bytes, now_ms)


def with_fetch_throttle(pieces: list, version: int, throttle_ms: int) -> list:
    """An encoded Fetch response (v1+) with its throttle_time_ms set: the first field after
    the response header (size, correlation id, and from v12 an empty tagged-fields byte)."""
    assert version >= 1, version
    offset = 8 + (1 if version >= FETCH_FLEXIBLE_VERSION else 0)
    leading = 0  # the byte pieces before the first file range: the header is among them
    while leading < len(pieces) and not isinstance(pieces[leading], FileRange):
        leading += 1
    head = bytearray(b"".join(pieces[:leading]))
    assert len(head) >= offset + 4, "a Fetch response starts with its header"
    _I32.pack_into(head, offset, throttle_ms)
    return [bytes(head), *pieces[leading:]]


def response_size(pieces: list) -> int:
    """The bytes an encoded response puts on the wire (byte pieces and file ranges)."""
    return sum(piece.size_bytes if isinstance(piece, FileRange) else len(piece)
               for piece in pieces)


def is_consumer_fetch(api_key: int, replica_id: int) -> bool:
    return api_key == FETCH_KEY and replica_id < 0
