"""Who a connection is: SaslHandshake and SaslAuthenticate on one connection (Kafka's
SaslServerAuthenticator), without I/O.

Theory of operation. A SASL listener serves nothing before its connection authenticates: the
first requests may be ApiVersions (answered by the broker as usual) and SaslHandshake, which picks
a mechanism; then SaslAuthenticate requests carry the mechanism's tokens (``SaslServer``) until
it completes and the connection's principal is ``User:<name>``. With SaslHandshake v0 the tokens
come as bare size-prefixed frames instead (the pre-KIP-152 wire, which kafka-python still speaks).
Any other request before that, a second handshake, or a frame over ``sasl.server.max.receive.size``
closes the connection after one log line. A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and Kafka's message, then the connection closes after
``FAILED_AUTHENTICATION_DELAY_MS`` (Kafka's ``connection.failed.authentication.delay.ms``: a
password guesser pays for every guess).

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` set, SaslAuthenticate tells the
client its session lifetime; the client authenticates again on the same connection before it
ends (a new SaslHandshake, then SaslAuthenticate), as the same principal, and a request that
arrives after the session ended closes the connection.

A PLAINTEXT listener authenticates no one: every connection is ``User:ANONYMOUS``, and a
SaslHandshake on it is answered ILLEGAL_SASL_STATE, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import Errors
from ..protocol import codec
from ..protocol.versions import API_VERSIONS_KEY, SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from ..security.sasl import MECHANISMS, CredentialStore, SaslAuthenticationFailed, SaslServer
from ..security.sasl_client import SaslClient, SaslClientError, SaslCredentials

log = logging.getLogger("pylog.broker")

ANONYMOUS = "User:ANONYMOUS"  # Kafka's KafkaPrincipal.ANONYMOUS
SASL_SERVER_MAX_RECEIVE_BYTES = 524_288  # Kafka's sasl.server.max.receive.size
FAILED_AUTHENTICATION_DELAY_MS = 100  # Kafka's connection.failed.authentication.delay.ms
# The principal of the connection a handler serves ("User:alice"), set once it authenticated.
PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar("principal", default=ANONYMOUS)
_SIZE = struct.Struct(">i")


class _State(Enum):
    HANDSHAKE = "expecting SaslHandshake"
    AUTHENTICATE = "expecting SaslAuthenticate"
    RAW_TOKENS = "expecting SASL tokens (handshake v0)"
    AUTHENTICATED = "authenticated"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the connection does with a frame the authenticator took: send ``response`` (if
    any), then close it after ``close_after_ms`` (None: keep it open)."""

    response: bytes | memoryview | None
    close_reason: str | None = None
    close_after_ms: int = 0


class ConnectionAuthentication:
    """One connection's authentication state; ``mechanisms`` empty means a PLAINTEXT listener."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: Callable[[], CredentialStore],
                 *, reauth_ms: int, now_ms: Callable[[], int]) -> None:
        assert set(mechanisms) <= set(MECHANISMS), mechanisms
        self.mechanisms = mechanisms
        self._credentials = credentials
        self._reauth_ms = reauth_ms
        self._now_ms = now_ms
        self._state = _State.HANDSHAKE if mechanisms else _State.AUTHENTICATED
        self.principal: str | None = None if mechanisms else ANONYMOUS
        self.session_expires_ms: int | None = None
        self.mechanism: str | None = None  # the SASL mechanism of its last handshake
        self._server: SaslServer | None = None
        self._handshake_version = 1

    @property
    def authenticated(self) -> bool:
        return self.principal is not None and self._state is _State.AUTHENTICATED

    def frame_bytes_max(self, configured: int) -> int:
        """The largest frame this connection may send now."""
        return configured if self.authenticated else min(configured, SASL_SERVER_MAX_RECEIVE_BYTES)

    def on_frame(self, frame: bytes) -> Verdict | None:
        """The verdict on ``frame``, or None: the broker serves it as a request."""
        if self._state is _State.RAW_TOKENS:
            return self._raw_token(frame)
        try:
            header, _ = codec.read_request_header(frame)
        except codec.MalformedRequestError:
            return None  # the broker closes it as malformed
        if header.api_key == SASL_HANDSHAKE_KEY:
            return self._handshake(frame)
        if header.api_key == SASL_AUTHENTICATE_KEY:
            return self._authenticate(frame)
        if self._state is _State.AUTHENTICATED:
            return self._expired() if self._is_expired() else None
        if header.api_key == API_VERSIONS_KEY and self._state is _State.HANDSHAKE:
            return None
        return Verdict(None, f"request of API {header.api_key} before authentication "
                             f"({self._state.value})")

    # -- the exchange ---------------------------------------------------------------------------

    def _handshake(self, frame: bytes) -> Verdict:
        request = codec.parse_request(frame)
        answer = {"mechanisms": list(self.mechanisms)}
        if not self.mechanisms or self._state not in (_State.HANDSHAKE, _State.AUTHENTICATED):
            return self._answer(request, {**answer, "error_code": Errors.ILLEGAL_SASL_STATE},
                                None if not self.mechanisms else "SaslHandshake out of turn")
        mechanism = request.body.mechanism
        if mechanism not in self.mechanisms:
            return self._answer(request, {**answer, "error_code":
                                          Errors.UNSUPPORTED_SASL_MECHANISM},
                                f"unsupported SASL mechanism {mechanism!r}")
        if self._state is _State.AUTHENTICATED and request.header.api_version == 0:
            return self._answer(request, {**answer, "error_code": Errors.ILLEGAL_SASL_STATE},
                                "re-authentication needs SaslHandshake v1")
        self._server = self._credentials().server(mechanism)
        self.mechanism = mechanism
        self._handshake_version = request.header.api_version
        self._state = _State.AUTHENTICATE if self._handshake_version else _State.RAW_TOKENS
        return self._answer(request, {**answer, "error_code": 0})

    def _authenticate(self, frame: bytes) -> Verdict:
        request = codec.parse_request(frame)
        if self._state is not _State.AUTHENTICATE or self._server is None:
            return self._answer(request, _failure(Errors.ILLEGAL_SASL_STATE,
                                                  "SaslAuthenticate before SaslHandshake"),
                                "SaslAuthenticate out of turn")
        try:
            token = self._server.step(request.body.auth_bytes)
            self._check_complete()
        except SaslAuthenticationFailed as error:
            return self._answer(request, _failure(Errors.SASL_AUTHENTICATION_FAILED, str(error)),
                                f"authentication failed: {error}", FAILED_AUTHENTICATION_DELAY_MS)
        lifetime_ms = self._session_lifetime_ms() if self.authenticated else 0
        return self._answer(request, {"error_code": 0, "error_message": None,
                                      "auth_bytes": token, "session_lifetime": lifetime_ms})

    def _raw_token(self, frame: bytes) -> Verdict:
        assert self._server is not None
        try:
            token = self._server.step(frame)
            self._check_complete()
        except SaslAuthenticationFailed as error:
            return Verdict(None, f"authentication failed: {error}", FAILED_AUTHENTICATION_DELAY_MS)
        return Verdict(_SIZE.pack(len(token)) + token)

    def _check_complete(self) -> None:
        """After a step: a completed exchange names the connection's principal, the same one
        on re-authentication (Kafka refuses a change of principal)."""
        server = self._server
        if server is None or not server.complete:
            return
        principal = f"User:{server.principal}"
        if self.principal is not None and principal != self.principal:
            raise SaslAuthenticationFailed(
                f"Cannot change principals during re-authentication from {self.principal}")
        self.principal, self._state, self._server = principal, _State.AUTHENTICATED, None
        self.session_expires_ms = (self._now_ms() + self._reauth_ms) if self._reauth_ms else None

    def _session_lifetime_ms(self) -> int:
        return self._reauth_ms

    def _is_expired(self) -> bool:
        return self.session_expires_ms is not None and self._now_ms() >= self.session_expires_ms

    def _expired(self) -> Verdict:
        return Verdict(None, f"{self.principal}'s session expired without re-authentication "
                             f"(connections.max.reauth.ms {self._reauth_ms})")

    @staticmethod
    def _answer(request: codec.Request, body: dict[str, Any], close_reason: str | None = None,
                close_after_ms: int = 0) -> Verdict:
        return Verdict(codec.encode_response(request.header, body), close_reason, close_after_ms)


def _failure(error_code: int, message: str) -> dict[str, Any]:
    return {"error_code": error_code, "error_message": message, "auth_bytes": b"",
            "session_lifetime": 0}


# == the client's side: a broker's own connections to its peers ==================================

class PeerAuthenticationError(ConnectionError):
    """A peer refused our credentials, or did not prove it knows them."""


async def authenticate_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                  credentials: SaslCredentials, client_id: str,
                                  timeout_s: float) -> None:
    """SaslHandshake v1 then SaslAuthenticate v2 until ``credentials`` are accepted; raises
    PeerAuthenticationError (the caller closes the connection)."""
    correlation_ids = itertools.count(1)

    async def call(api_key: int, version: int, body: dict[str, Any]) -> Any:
        correlation_id = next(correlation_ids)
        writer.write(codec.encode_request(api_key, version, correlation_id, client_id, body))
        size = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
        frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        answered_id, response = codec.decode_response(api_key, version, frame)
        assert answered_id == correlation_id, (answered_id, correlation_id)
        return response

    handshake = await call(SASL_HANDSHAKE_KEY, 1, {"mechanism": credentials.mechanism})
    if handshake.error_code != 0:
        raise PeerAuthenticationError(f"SaslHandshake for {credentials.mechanism} refused "
                                      f"(error {int(handshake.error_code)})")
    client = SaslClient(credentials)
    token: bytes | None = client.first()
    while token is not None:
        answer = await call(SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token})
        if answer.error_code != 0:
            raise PeerAuthenticationError(f"authentication as {credentials.username} failed: "
                                          f"{answer.error_message}")
        try:
            token = client.step(answer.auth_bytes)
        except SaslClientError as error:
            raise PeerAuthenticationError(str(error)) from None
