"""The JSON framing of the controller RPC (``controller/rpc.py``) and of the Raft voters
(``raft/shell.py``): loopback only, not Kafka's wire format (that is ``protocol/``).

Every message is one *frame*: an int32 big-endian length, then that many bytes holding one UTF-8
JSON object with an integer ``id``. Each user bounds the frames it reads (``read_frame``'s
``size_max``); a frame outside the bound, or one that is not such an object, is a FrameError.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

__all__ = ["FRAME_SIZE", "FrameError", "encode_frame", "parse_frame", "read_frame"]

FRAME_SIZE = struct.Struct(">i")  # the length before each frame's payload


class FrameError(ValueError):
    """A frame broke the wire format (size out of bounds, not UTF-8 JSON, wrong shape)."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """One frame holding ``message`` as compact JSON."""
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    return FRAME_SIZE.pack(len(payload)) + payload


def parse_frame(payload: bytes) -> dict[str, Any]:
    """The JSON object in a frame's payload, or FrameError."""
    try:
        message = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FrameError(f"frame is not UTF-8 JSON: {str(error)[:100]}") from None
    if not isinstance(message, dict):
        raise FrameError(f"frame holds a JSON {type(message).__name__}, not an object")
    if type(message.get("id")) is not int:
        raise FrameError("frame has no integer id")
    return message


async def read_frame(reader: asyncio.StreamReader, size_max: int) -> bytes | None:
    """The next frame's payload; None at a clean end of stream between frames."""
    try:
        head = await reader.readexactly(FRAME_SIZE.size)
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise  # the peer went away mid-frame: a dropped connection, not a bad frame
        return None
    size = FRAME_SIZE.unpack(head)[0]
    if not 0 <= size <= size_max:
        raise FrameError(f"frame of {size} bytes is outside 0..{size_max}")
    return await reader.readexactly(size)
