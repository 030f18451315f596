"""SASL on the client's side, sans-IO: the tokens a broker sends when it connects to a peer.

The cluster's own connections (a follower's replica fetches, the coordinators' inter-broker
requests) authenticate as the inter-broker principal with SCRAM-SHA-512, as any Kafka client
would: ``first()`` is the first SaslAuthenticate token, ``step(answer)`` the next one (None when
the exchange is complete, after checking the server's signature: a peer that does not know the
credential is not trusted either).
"""

from __future__ import annotations

from dataclasses import dataclass

from scramp import ScramClient, ScramException

from .sasl import MECHANISMS, PLAIN, SCRAM_SHA_512


class SaslClientError(Exception):
    """The server's answer does not prove it knows the credential."""


@dataclass(frozen=True)
class SaslCredentials:
    """Who a connection authenticates as (never printed: repr hides the password)."""

    username: str
    password: str
    mechanism: str = SCRAM_SHA_512

    def __post_init__(self) -> None:
        assert self.mechanism in MECHANISMS, self.mechanism

    def __repr__(self) -> str:
        return f"SaslCredentials({self.username!r}, {self.mechanism})"


class SaslClient:
    """One authentication exchange, as the client."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self.credentials = credentials
        self._scram = None if credentials.mechanism == PLAIN else ScramClient(
            [credentials.mechanism], credentials.username, credentials.password)
        self._round = 0

    def first(self) -> bytes:
        self._round = 1
        if self._scram is None:
            return f"\0{self.credentials.username}\0{self.credentials.password}".encode()
        return self._scram.get_client_first().encode()

    def step(self, answer: bytes) -> bytes | None:
        """The next token for the server's ``answer``; None once authenticated."""
        self._round += 1
        try:
            if self._scram is None or self._round == 3:
                if self._scram is not None:
                    self._scram.set_server_final(answer.decode())
                return None
            self._scram.set_server_first(answer.decode())
            return self._scram.get_client_final().encode()
        except (ScramException, UnicodeDecodeError) as error:
            raise SaslClientError(f"the server failed SCRAM authentication: {error}") from None
