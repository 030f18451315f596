"""The broker's SASL mechanisms against an independent client: scramp's ScramClient for SCRAM
(RFC 5802 / 7677), hand-built tokens for PLAIN (RFC 4616)."""

from __future__ import annotations

import hmac

import pytest
from scramp import ScramClient

from pylog_nb.broker.security.sasl import (
    FAILED,
    PLAIN,
    SCRAM_ITERATIONS_MAX,
    SCRAM_ITERATIONS_MIN,
    SCRAM_MECHANISMS,
    CredentialStore,
    SaslAuthenticationFailed,
    SaslServer,
    ScramCredential,
    plain_checker,
    scram_credential,
)
from pylog_nb.broker.security.sasl_client import SaslClient, SaslClientError, SaslCredentials

PASSWORDS = {"alice": "wonderland", "bob": "builder"}


def server(mechanism: str, credentials: dict | None = None) -> SaslServer:
    stored = credentials if credentials is not None else {
        (user, m): scram_credential(m, password)
        for user, password in PASSWORDS.items() for m in SCRAM_MECHANISMS}
    return SaslServer(mechanism, scram=lambda user, m: stored.get((user, m)),
                      plain=plain_checker(PASSWORDS))


def scram_exchange(mechanism: str, user: str, password: str, sasl: SaslServer) -> ScramClient:
    client = ScramClient([mechanism], user, password)
    client.set_server_first(sasl.step(client.get_client_first().encode()).decode())
    client.set_server_final(sasl.step(client.get_client_final().encode()).decode())
    return client


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_a_scram_client_with_the_password_authenticates_and_verifies_the_server(mechanism):
    sasl = server(mechanism)
    scram_exchange(mechanism, "alice", "wonderland", sasl)  # the client checks server-final
    assert (sasl.complete, sasl.principal) == (True, "alice")


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
@pytest.mark.parametrize("user, password", [("alice", "builder"), ("mallory", "wonderland")])
def test_a_wrong_password_or_an_unknown_user_fails_alike(mechanism, user, password):
    sasl = server(mechanism)
    with pytest.raises(SaslAuthenticationFailed) as failed:
        scram_exchange(mechanism, user, password, sasl)
    assert str(failed.value) == FAILED  # never says which of the two was wrong
    assert (sasl.complete, sasl.principal) == (False, None)


def test_a_credential_of_the_other_scram_mechanism_does_not_serve():
    only_256 = {("alice", "SCRAM-SHA-256"): scram_credential("SCRAM-SHA-256", "wonderland")}
    with pytest.raises(SaslAuthenticationFailed):
        scram_exchange("SCRAM-SHA-512", "alice", "wonderland", server("SCRAM-SHA-512", only_256))


def test_credentials_keep_no_password_and_are_salted_afresh():
    first, second = (scram_credential("SCRAM-SHA-512", "wonderland") for _ in range(2))
    assert first.salt != second.salt and first.stored_key != second.stored_key
    assert b"wonderland" not in first.salt + first.stored_key + first.server_key
    assert first.iterations == SCRAM_ITERATIONS_MIN


@pytest.mark.parametrize("iterations", [SCRAM_ITERATIONS_MIN - 1, SCRAM_ITERATIONS_MAX + 1])
def test_iterations_outside_kafkas_bounds_are_refused(iterations):
    with pytest.raises(ValueError, match="iterations must be between 4096 and 16384"):
        scram_credential("SCRAM-SHA-256", "pw", iterations)
    with pytest.raises(AssertionError):
        ScramCredential("SCRAM-SHA-256", b"s", b"k", b"k", iterations)


@pytest.mark.parametrize("token, principal", [
    (b"\0alice\0wonderland", "alice"), (b"alice\0alice\0wonderland", "alice")])
def test_plain_with_the_password_authenticates(token, principal):
    sasl = server(PLAIN)
    assert sasl.step(token) == b""
    assert (sasl.complete, sasl.principal) == (True, principal)


@pytest.mark.parametrize("token, message", [
    (b"\0alice\0builder", FAILED),
    (b"\0mallory\0x", FAILED),
    (b"bob\0alice\0wonderland", "authorization id that is different from username"),
    (b"alice\0wonderland", "expected 3 tokens"),
    (b"\0\0wonderland", "empty user or password"),
    (b"\0\xff\0x", "not UTF-8"),
])
def test_plain_refusals_are_one_line(token, message):
    with pytest.raises(SaslAuthenticationFailed, match=message):
        server(PLAIN).step(token)


def test_an_exchange_ends_once():
    sasl = server(PLAIN)
    sasl.step(b"\0alice\0wonderland")
    with pytest.raises(SaslAuthenticationFailed, match="already complete"):
        sasl.step(b"\0alice\0wonderland")


def test_an_unknown_mechanism_is_refused():
    with pytest.raises(ValueError, match="unsupported SASL mechanism 'GSSAPI'"):
        server("GSSAPI")


def test_store_mocks_an_unknown_user_through_both_scram_rounds():
    """An unknown user gets a server-first like a known one (a stable salt), and fails only on
    the proof, as a wrong password does: the answer does not tell them apart."""
    stored = {("alice", m): scram_credential(m, "wonderland") for m in SCRAM_MECHANISMS}
    store = CredentialStore(lambda user, m: stored.get((user, m)))
    for user, password in (("mallory", "x"), ("alice", "wrong")):
        for mechanism in SCRAM_MECHANISMS:
            client = ScramClient([mechanism], user, password)
            sasl = store.server(mechanism)
            server_first = sasl.step(client.get_client_first().encode())
            client.set_server_first(server_first.decode())
            with pytest.raises(SaslAuthenticationFailed, match=FAILED):
                sasl.step(client.get_client_final().encode())
    first = [store.server(SCRAM_MECHANISMS[0]).step(
        ScramClient([SCRAM_MECHANISMS[0]], "mallory", "x").get_client_first().encode())
        for _ in range(2)]
    assert [f.split(b",")[1] for f in first][0] == [f.split(b",")[1] for f in first][1]


def test_store_checks_plain_passwords_against_scram_credentials():
    stored = {("alice", m): scram_credential(m, "wonderland") for m in SCRAM_MECHANISMS}
    store = CredentialStore(lambda user, m: stored.get((user, m)))
    assert store.plain("alice", "wonderland")
    assert not store.plain("alice", "wonderland!")
    assert not store.plain("mallory", "wonderland")
    assert store.server(PLAIN).step(b"\0alice\0wonderland") == b""
    with pytest.raises(SaslAuthenticationFailed, match=FAILED):
        store.server(PLAIN).step(b"\0mallory\0wonderland")


@pytest.mark.parametrize("mechanism", [PLAIN, *SCRAM_MECHANISMS])
def test_our_client_authenticates_with_our_server(mechanism):
    stored = {("alice", m): scram_credential(m, "wonderland") for m in SCRAM_MECHANISMS}
    store = CredentialStore(lambda user, m: stored.get((user, m)))
    server = store.server(mechanism)
    client = SaslClient(SaslCredentials("alice", "wonderland", mechanism))
    token: bytes | None = client.first()
    while token is not None:
        token = client.step(server.step(token))
    assert server.complete and server.principal == "alice"
    assert "wonderland" not in repr(client.credentials)


def test_our_client_refuses_a_server_that_does_not_know_the_credential():
    server = CredentialStore(lambda user, m: None).server(SCRAM_MECHANISMS[1])
    client = SaslClient(SaslCredentials("alice", "wonderland"))
    client_final = client.step(server.step(client.first()))
    assert client_final is not None
    with pytest.raises(SaslAuthenticationFailed):
        server.step(client_final)
    forged = SaslClient(SaslCredentials("alice", "wonderland"))
    forged.step(CredentialStore(lambda user, m: scram_credential(m, "other")).server(
        SCRAM_MECHANISMS[1]).step(forged.first()))
    with pytest.raises(SaslClientError):
        forged.step(b"v=AAAA")


def _librdkafka_final(server: SaslServer, password: str, prefix: str) -> bytes:
    """A client-final whose nonce is ``prefix`` + the server's nonce, with a proof computed over
    what is sent, as librdkafka before 2.6.1 computes it (librdkafka#4895)."""
    import base64
    import hashlib
    client_first_bare = "n=alice,r=ab=c}d"
    server_first = server.step(f"n,,{client_first_bare}".encode()).decode()
    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attributes["s"]),
                                 int(attributes["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    without_proof = f"c=biws,r={prefix}{attributes['r']}"
    message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha512(client_key).digest(), message, "sha512").digest()
    proof_bytes = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    proof = base64.b64encode(proof_bytes).decode()
    return f"{without_proof},p={proof}".encode()


def test_scram_accepts_old_librdkafka_nonce_and_nothing_looser():
    stored = {("alice", SCRAM_MECHANISMS[1]): scram_credential(SCRAM_MECHANISMS[1], "pw")}
    store = CredentialStore(lambda user, m: stored.get((user, m)))
    server = store.server(SCRAM_MECHANISMS[1])
    assert server.step(_librdkafka_final(server, "pw", "ab=c}d")).startswith(b"v=")
    assert server.principal == "alice"
    for prefix in ("x", "ab=c}dab=c}d"):
        other = store.server(SCRAM_MECHANISMS[1])
        with pytest.raises(SaslAuthenticationFailed):
            other.step(_librdkafka_final(other, "pw", prefix))
