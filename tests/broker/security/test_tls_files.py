"""The cluster's CA and broker certificate (broker/security/tls.py), and the settings built on
them, without any process or socket: handshakes run over memory BIOs."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import stat
import subprocess
import sys

import pytest
from cryptography import x509

from pylog_nb.broker.security import secrets, tls
from pylog_nb.broker.server.authentication import ANONYMOUS
from pylog_nb.broker.server.config import SASL_PLAINTEXT, SASL_SSL, SSL, BrokerConfig
from pylog_nb.broker.server.node import BrokerNode
from pylog_nb.cluster import ClusterError, LocalCluster


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> str:
    """Run a TLS handshake between the two contexts in memory; the negotiated version."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    client_side = client.wrap_bio(client_in, client_out, server_hostname=hostname)
    done = {"server": False, "client": False}
    for _ in range(10):
        for name, side, outgoing, peer_in in (("client", client_side, client_out, server_in),
                                              ("server", server_side, server_out, client_in)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(outgoing.read())
        if all(done.values()):
            version = client_side.version()
            assert version is not None
            return version
    raise AssertionError("the handshake did not finish")


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(path) -> set[str]:
    san = _cert(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ({str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
            | set(san.get_values_for_type(x509.DNSName)))


def test_files_are_private_and_the_certificate_is_the_cas(tmp_path):
    files = tls.ensure_files(tmp_path)
    directory = tmp_path / tls.TLS_DIR
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    names = {p.name for p in directory.iterdir()}
    assert names == {tls.CA_CERT_FILE, tls.CA_KEY_FILE, tls.CERT_FILE, tls.KEY_FILE}
    for path in directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    ca, cert = _cert(files.ca), _cert(files.cert)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.not_valid_after_utc - ca.not_valid_before_utc >= datetime.timedelta(days=3650)
    assert _sans(files.cert) == {"127.0.0.1", "localhost"}


def test_a_client_trusting_the_ca_completes_a_handshake_of_tls_12_or_later(tmp_path):
    files = tls.ensure_files(tmp_path)
    server = tls.server_context(files.cert, files.key)
    for hostname in ("127.0.0.1", "localhost"):
        version = _handshake(server, tls.client_context(files.ca), hostname)
        assert version in ("TLSv1.2", "TLSv1.3")
    assert server.minimum_version == ssl.TLSVersion.TLSv1_2


def test_another_ca_or_a_host_the_certificate_does_not_name_fails(tmp_path):
    files = tls.ensure_files(tmp_path / "one")
    other = tls.ensure_files(tmp_path / "two")
    server = tls.server_context(files.cert, files.key)
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(server, tls.client_context(other.ca), "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|match"):
        _handshake(server, tls.client_context(files.ca), "127.0.0.2")
    with pytest.raises(ssl.SSLCertVerificationError):  # the system's CAs do not know ours
        _handshake(server, tls.client_context(None), "127.0.0.1")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_a_client_older_than_tls_12_is_refused(tmp_path):
    files = tls.ensure_files(tmp_path)
    client = tls.client_context(files.ca)
    client.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    client.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError):
        _handshake(tls.server_context(files.cert, files.key), client, "127.0.0.1")


def test_another_host_is_named_too(tmp_path):
    files = tls.ensure_files(tmp_path, ["10.1.2.3", "kafka.example"])
    assert _sans(files.cert) == {"127.0.0.1", "localhost", "10.1.2.3", "kafka.example"}
    san = _cert(files.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.1.2.3") in san.get_values_for_type(x509.IPAddress)
    _handshake(tls.server_context(files.cert, files.key), tls.client_context(files.ca),
               "10.1.2.3")


def test_a_restart_reuses_the_files(tmp_path):
    first = tls.ensure_files(tmp_path)
    before = {p.name: p.read_bytes() for p in (tmp_path / tls.TLS_DIR).iterdir()}
    again = tls.ensure_files(tmp_path, ["127.0.0.1"])
    assert again == first
    assert {p.name: p.read_bytes() for p in (tmp_path / tls.TLS_DIR).iterdir()} == before


def test_a_new_host_or_a_certificate_near_its_end_gets_a_new_one_from_the_same_ca(tmp_path):
    first = tls.ensure_files(tmp_path)
    ca, cert = first.ca.read_bytes(), first.cert.read_bytes()
    tls.ensure_files(tmp_path, ["192.168.7.7"])
    assert first.ca.read_bytes() == ca
    assert first.cert.read_bytes() != cert
    assert "192.168.7.7" in _sans(first.cert)
    _cert(first.cert).verify_directly_issued_by(_cert(first.ca))
    renewed = first.cert.read_bytes()
    later = datetime.datetime.now(datetime.UTC) + tls.CERT_VALIDITY - datetime.timedelta(days=1)
    tls.ensure_files(tmp_path, ["192.168.7.7"], now=later)
    assert first.ca.read_bytes() == ca
    assert first.cert.read_bytes() != renewed
    assert _cert(first.cert).not_valid_after_utc > later + tls.RENEW_BEFORE


def test_a_broken_file_is_one_line(tmp_path):
    files = tls.ensure_files(tmp_path)
    files.ca.write_text("not a certificate")
    with pytest.raises(tls.TlsError, match="cannot prepare the TLS files"):
        tls.ensure_files(tmp_path)


def test_a_tls_listener_needs_a_certificate_and_a_key(tmp_path):
    for protocol in (SSL, SASL_SSL):
        with pytest.raises(AssertionError, match="certificate"):
            BrokerConfig(broker_id=1, data_dir=tmp_path, security_protocol=protocol)
    # the command line says so before anything starts (a process: __main__ blocks hypothesis)
    done = subprocess.run(
        [sys.executable, "-m", "pylog_nb.broker", "--broker-id", "1", "--data-dir",
         str(tmp_path / "b"), "--controller", "127.0.0.1:1", "--security-protocol", SASL_SSL,
         "--ssl-cafile", str(tmp_path / "ca.pem")],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--security-protocol SASL_SSL needs --ssl-certfile and --ssl-keyfile" in done.stderr
    files = tls.ensure_files(tmp_path)
    config = BrokerConfig(broker_id=1, data_dir=tmp_path, security_protocol=SASL_SSL,
                          ssl_certfile=files.cert, ssl_keyfile=files.key, ssl_cafile=files.ca)
    assert config.tls and config.sasl
    assert config.config_rows["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL"
    ssl_only = BrokerConfig(broker_id=1, data_dir=tmp_path, security_protocol=SSL,
                            ssl_certfile=files.cert, ssl_keyfile=files.key)
    assert ssl_only.tls and not ssl_only.sasl


def test_a_tls_cluster_names_its_ca_and_passes_the_files_to_its_brokers(tmp_path):
    cluster = LocalCluster(brokers=1, data_dir=tmp_path, tls=True)
    settings = cluster.client_config()
    ca = tmp_path / tls.TLS_DIR / tls.CA_CERT_FILE
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == str(ca) == str(cluster.ca_file)
    command = cluster._command(cluster.brokers[1], ready_w=9)
    assert command[command.index("--security-protocol") + 1] == "SASL_SSL"
    assert command[command.index("--ssl-cafile") + 1] == str(ca)
    assert command[command.index("--ssl-certfile") + 1] == str(ca.with_name(tls.CERT_FILE))
    assert command[command.index("--ssl-keyfile") + 1] == str(ca.with_name(tls.KEY_FILE))
    plain = LocalCluster(brokers=1, data_dir=tmp_path / "plain")
    assert plain.client_config()["security.protocol"] == "SASL_PLAINTEXT"
    assert "ssl.ca.location" not in plain.client_config()
    with pytest.raises(ClusterError, match="tls=True needs security='sasl'"):
        LocalCluster(brokers=1, data_dir=tmp_path / "open", security="none", tls=True)


def test_a_broker_node_of_each_protocol(tmp_path):
    """SSL: TLS, and every client is User:ANONYMOUS (no SASL, as Kafka without client
    certificates); SASL_SSL: TLS, sign-in first, and the broker signs in to its peers over TLS."""
    files = tls.ensure_files(tmp_path)
    secrets_file = tmp_path / secrets.SECRETS_FILE
    secrets.write(secrets_file, secrets.generate())
    nodes = {protocol: BrokerNode(BrokerConfig(
        broker_id=1, data_dir=tmp_path / protocol, security_protocol=protocol,
        ssl_certfile=files.cert, ssl_keyfile=files.key, ssl_cafile=files.ca,
        secrets_file=secrets_file, controllers=(("127.0.0.1", 1),)))
        for protocol in (SSL, SASL_SSL, SASL_PLAINTEXT)}
    try:
        ssl_only, sasl_ssl, sasl_plain = nodes[SSL], nodes[SASL_SSL], nodes[SASL_PLAINTEXT]
        assert ssl_only.new_authentication().principal == ANONYMOUS
        assert ssl_only.new_authentication().authenticated
        assert ssl_only.inter_broker_credentials is None
        assert ssl_only.server_ssl is not None and ssl_only.inter_broker_ssl is not None
        assert sasl_ssl.new_authentication().principal is None  # signs in first
        assert sasl_ssl.inter_broker_credentials is not None
        assert sasl_ssl.server_ssl is not None and sasl_ssl.inter_broker_ssl is not None
        assert sasl_ssl.inter_broker_ssl.check_hostname
        assert sasl_plain.server_ssl is None and sasl_plain.inter_broker_ssl is None
    finally:
        for node in nodes.values():
            node.close()
