"""The controllers' listeners take a connection only from a holder of the cluster's internal token.

Theory of operation (issue 23): with the cluster's secrets (``--secrets``), the controller RPC
listener (``server.py``) and the Raft listener between voters (``raft/shell.py``) read one frame
first, before anything else on the connection (``rpc_framing.py``)::

    {"id": int, "method": "authenticate", "params": {"token": "<internal_token>"}}

- the right token (compared in constant time): answered ``error_code`` 0 (the RPC listener; a
  Raft peer never reads its outgoing connection, so it is not answered), then the connection is
  served as before;
- a wrong token: answered SASL_AUTHENTICATION_FAILED (58) "authentication failed", then closed;
- any other first frame, a malformed or oversized one, or none within AUTHENTICATE_TIMEOUT_MS:
  closed after one warning line naming the peer. A peer that connects and leaves without a word
  is closed silently (a port probe).

Nothing the peer sent before authenticating is acted on: no registration, no vote. Without
secrets (token None) nothing changes: no frame is expected, none is sent. The clients
(``rpc.py``, the Raft shell's outgoing connections) send the frame first on each new connection
when they are given a token.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

from ..errors import Errors
from ..rpc_framing import FrameError, encode_frame, parse_frame, read_frame

__all__ = [
    "AUTHENTICATE",
    "AUTHENTICATION_FAILED",
    "accept_connection",
    "authenticate_request",
    "token_matches",
]

AUTHENTICATE = "authenticate"  # the method of the first frame
AUTHENTICATION_FAILED = "authentication failed"
AUTHENTICATE_TIMEOUT_MS = 10_000  # a connection that says nothing for this long is closed
AUTHENTICATE_BYTES_MAX = 4 * 1024  # the first frame is small; a larger one is not read


def authenticate_request(token: str, frame_id: int = 0) -> bytes:
    """The first frame a client sends on a new connection."""
    return encode_frame({"id": frame_id, "method": AUTHENTICATE, "params": {"token": token}})


def token_matches(expected: str, offered: Any) -> bool:
    """Whether ``offered`` is the token, compared in constant time."""
    return isinstance(offered, str) and hmac.compare_digest(expected.encode(), offered.encode())


def _answer(request: dict[str, Any], code: int, message: str) -> bytes:
    return encode_frame({"id": request["id"], "error_code": code, "message": message,
                         "result": {} if code == Errors.NONE else None})


async def accept_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str | None,
    log: logging.Logger, listener: str, *, answer: bool = True,
) -> bool:
    """Authenticate a new connection (see the module docstring); True: serve it, False: the
    caller closes it. ``answer``: acknowledge the right token (the RPC listener does)."""
    if token is None:
        return True
    peer = writer.get_extra_info("peername")
    try:
        async with asyncio.timeout(AUTHENTICATE_TIMEOUT_MS / 1000):
            payload = await read_frame(reader, AUTHENTICATE_BYTES_MAX)
        if payload is None:
            return False
        request = parse_frame(payload)
    except (FrameError, TimeoutError, asyncio.IncompleteReadError, ConnectionError) as error:
        log.warning("%s: closing unauthenticated connection from %s: %s", listener, peer,
                    str(error) or type(error).__name__)
        return False
    params = request.get("params")
    if request.get("method") != AUTHENTICATE or not isinstance(params, dict):
        log.warning("%s: closing connection from %s: its first frame is not authenticate",
                    listener, peer)
        return False
    if not token_matches(token, params.get("token")):
        log.warning("%s: closing connection from %s: %s", listener, peer, AUTHENTICATION_FAILED)
        await _send(writer, _answer(request, Errors.SASL_AUTHENTICATION_FAILED,
                                    AUTHENTICATION_FAILED))
        return False
    if answer:
        await _send(writer, _answer(request, Errors.NONE, ""))
    return True


async def _send(writer: asyncio.StreamWriter, frame: bytes) -> None:
    try:
        writer.write(frame)
        await writer.drain()
    except ConnectionError:
        pass
