"""SASL on the broker's side, sans-IO: one ``SaslServer`` per connection's authentication.

The wire (SaslHandshake picks the mechanism, SaslAuthenticate carries each token) feeds
``SaslServer.step`` the client's bytes and sends back what it returns. Mechanisms as Kafka's:

- ``PLAIN`` (RFC 4616): one token ``authzid NUL authcid NUL password``; an authorization id,
  when given, must be the authentication id (Kafka impersonates no one).
- ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802, RFC 7677): client-first, server-first,
  client-final, server-final, computed by ``scramp``. A credential is what Kafka's
  ``UserScramCredentialsRecord`` keeps (salt, stored key, server key, iterations), never the
  password; iterations between Kafka's bounds, 4096 and 16384.

A failure is ``SaslAuthenticationFailed`` with the message Kafka's clients show
(SASL_AUTHENTICATION_FAILED on the wire); it never says whether the user or the password was
wrong, and ``CredentialStore`` makes an unknown user cost what a wrong password costs: SCRAM goes
through both rounds with a mock credential (RFC 5802, section 5.1: the same salt each time for
the same name), and PLAIN derives a key from the password against a mock credential too. A
PLAIN password is checked against the user's SCRAM credential, so one store serves both.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
SCRAM_ITERATIONS_MIN = 4096  # Kafka's ScramMechanism.minIterations
SCRAM_ITERATIONS_MAX = 16384  # ...and maxIterations
SCRAM_ITERATIONS_DEFAULT = 4096  # kafka-configs.sh's default
TOKEN_BYTES_MAX = 64 * 1024  # a SASL token longer than this is refused unread
FAILED = "Authentication failed: Invalid username or password"  # Kafka's message


class SaslAuthenticationFailed(Exception):
    """The client did not authenticate; the message is for the client."""


@dataclass(frozen=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism (Kafka's UserScramCredentialsRecord)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        assert self.mechanism in SCRAM_MECHANISMS, self.mechanism
        assert SCRAM_ITERATIONS_MIN <= self.iterations <= SCRAM_ITERATIONS_MAX, self.iterations


def scram_credential(mechanism: str, password: str,
                     iterations: int = SCRAM_ITERATIONS_DEFAULT) -> ScramCredential:
    """The credential a password gives (a random salt): what AlterUserScramCredentials stores."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: one of {SCRAM_MECHANISMS}")
    if not SCRAM_ITERATIONS_MIN <= iterations <= SCRAM_ITERATIONS_MAX:
        raise ValueError(f"iterations must be between {SCRAM_ITERATIONS_MIN} and "
                         f"{SCRAM_ITERATIONS_MAX}, not {iterations}")
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations)
    return ScramCredential(mechanism, salt, stored_key, server_key, count)


ScramLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential
PlainCheck = Callable[[str, str], bool]  # (user, password) -> whether it is right


class SaslServer:
    """One authentication exchange. ``step`` until ``complete``; then ``principal`` is the
    authenticated user. Any failure ends the exchange (the connection is closed after it)."""

    def __init__(self, mechanism: str, *, scram: ScramLookup, plain: PlainCheck) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.principal: str | None = None
        self.complete = False
        self._scram_lookup, self._plain = scram, plain
        self._scram = None if mechanism == PLAIN else ScramMechanism(mechanism).make_server(
            self._auth_info)
        self._scram_user: str | None = None
        self._client_nonce: str | None = None
        self._round = 0

    def step(self, token: bytes) -> bytes:
        """The client's next token in; the server's answer out."""
        if self.complete:
            raise SaslAuthenticationFailed("authentication is already complete")
        if len(token) > TOKEN_BYTES_MAX:
            raise SaslAuthenticationFailed(f"SASL token of {len(token)} bytes refused")
        self._round += 1
        if self.mechanism == PLAIN:
            return self._plain_step(token)
        return self._scram_step(token)

    # -- PLAIN ----------------------------------------------------------------------------------

    def _plain_step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user or not password:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: empty user or password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an "
                                           "authorization id that is different from username")
        if not self._plain(user, password):
            raise SaslAuthenticationFailed(FAILED)
        return self._done(user, b"")

    # -- SCRAM ----------------------------------------------------------------------------------

    def _scram_step(self, token: bytes) -> bytes:
        assert self._scram is not None
        try:
            text = token.decode("utf-8")
            if self._round == 1:
                self._scram.set_client_first(text)
                self._client_nonce = _attribute(text, "r")
                return self._scram.get_server_first().encode()
            if self._round == 2:
                self._accept_librdkafka_nonce(_attribute(text, "r"))
                self._scram.set_client_final(text)
                final = self._scram.get_server_final().encode()
                assert self._scram_user is not None  # set by _auth_info in the first round
                return self._done(self._scram_user, final)
        except (ScramException, UnicodeDecodeError):
            raise SaslAuthenticationFailed(FAILED) from None
        raise SaslAuthenticationFailed("unexpected SCRAM message after the exchange")

    def _accept_librdkafka_nonce(self, final_nonce: str | None) -> None:
        """librdkafka before 2.6.1 (Debian's kcat) sends its own nonce again in front of the
        whole nonce of the server-first message (librdkafka#4895). The message still carries
        the server's nonce, so replay protection holds; Kafka 3.8.1 to 3.9 accept it too. That
        exact form, and no other, is checked as the nonce (the proof covers what was sent)."""
        assert self._scram is not None
        expected = self._scram.nonce  # a scramp Nonce
        if final_nonce is not None and final_nonce == f"{self._client_nonce}{expected}":
            self._scram.nonce = type(expected)(final_nonce)

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        credential = self._scram_lookup(user, self.mechanism)
        if credential is None:
            raise ScramException(FAILED)
        self._scram_user = user
        return (credential.salt, credential.stored_key, credential.server_key,
                credential.iterations)

    def _done(self, user: str, answer: bytes) -> bytes:
        self.principal, self.complete = user, True
        return answer


class CredentialStore:
    """SCRAM credentials (``lookup``) for a SaslServer, with a mock for an unknown user."""

    def __init__(self, lookup: ScramLookup, mock_key: bytes | None = None) -> None:
        self.lookup = lookup
        self._mock_key = mock_key or secrets.token_bytes(32)  # per process: mocks stay stable

    def scram(self, user: str, mechanism: str) -> ScramCredential:
        """The user's credential, or a mock one no password matches."""
        return self.lookup(user, mechanism) or self._mock(user, mechanism)

    def plain(self, user: str, password: str) -> bool:
        """Whether ``password`` is the user's: checked against the SCRAM-SHA-512 (else -256)
        credential, with the same key derivation for an unknown user."""
        credential = next((c for c in (self.lookup(user, m) for m in reversed(SCRAM_MECHANISMS))
                           if c is not None), None)
        known = credential is not None
        credential = credential or self._mock(user, SCRAM_SHA_512)
        _salt, stored_key, _server_key, _count = ScramMechanism(
            credential.mechanism).make_auth_info(password, iteration_count=credential.iterations,
                                                 salt=credential.salt)
        return hmac.compare_digest(stored_key, credential.stored_key) and known

    def _mock(self, user: str, mechanism: str) -> ScramCredential:
        hash_name = "sha512" if mechanism == SCRAM_SHA_512 else "sha256"

        def derived(purpose: str) -> bytes:
            message = f"{purpose}\0{mechanism}\0{user}".encode()
            return hmac.new(self._mock_key, message, hash_name).digest()

        return ScramCredential(mechanism, derived("salt")[:16], derived("stored key"),
                               derived("server key"), SCRAM_ITERATIONS_DEFAULT)

    def server(self, mechanism: str) -> SaslServer:
        return SaslServer(mechanism, scram=self.scram, plain=self.plain)


def _attribute(message: str, name: str) -> str | None:
    """The value of attribute ``name`` in a SCRAM message (None if absent)."""
    for part in message.split(","):
        if part.startswith(f"{name}="):
            return part[len(name) + 1:]
    return None


def plain_checker(passwords: dict[str, str]) -> PlainCheck:
    """A PlainCheck over ``user -> password`` (constant-time comparison)."""

    def check(user: str, password: str) -> bool:
        expected = passwords.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    return check
