"""A cluster's own certificate authority and its brokers' certificate, for TLS listeners.

Theory of operation: the first TLS start of a data directory generates a CA (an EC P-256 key and
a self-signed certificate valid ten years) and one server certificate for every broker of the
cluster, signed by it, naming 127.0.0.1 and localhost (and the cluster's host when it is another
one) in its subjectAltName: clients verify it against ``ca.pem`` with hostname checks on, as
librdkafka does by default (``ssl.endpoint.identification.algorithm=https``). Every file is 0600
in ``<data_dir>/tls/`` (0700). A later start reuses them; it issues a new broker certificate from
the same CA only when the old one lacks a host or is near its end, so a client's ``ca.pem`` stays
good for the CA's life. Nothing here does I/O besides those files.

``server_context`` and ``client_context`` are the listener's and the brokers' own connections'
``ssl.SSLContext`` (TLS 1.2 or later).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TLS_DIR = "tls"
CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
CERT_FILE = "broker.pem"
KEY_FILE = "broker.key"
DEFAULT_HOSTS = ("127.0.0.1", "localhost")
CA_VALIDITY = datetime.timedelta(days=3650)  # ten years: a lab's CA outlives the lab
CERT_VALIDITY = datetime.timedelta(days=825)  # the longest a public CA may issue
RENEW_BEFORE = datetime.timedelta(days=30)  # a broker certificate this close to its end is reissued
CLOCK_SKEW = datetime.timedelta(minutes=5)  # not_valid_before this far back
_DIR_MODE = 0o700
_FILE_MODE = 0o600


class TlsError(RuntimeError):
    """The TLS files cannot be read or written; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where a cluster's CA certificate and its brokers' certificate and key are."""

    ca: Path  # what clients trust (ssl.ca.location)
    cert: Path  # the brokers' certificate (--ssl-certfile)
    key: Path  # its private key (--ssl-keyfile)


def ensure_files(data_dir: Path, hosts: Sequence[str] = DEFAULT_HOSTS,
                 now: datetime.datetime | None = None) -> TlsFiles:
    """The data directory's CA and broker certificate, generated the first time; a new broker
    certificate (same CA) when the old one does not name every host of ``hosts`` (127.0.0.1 and
    localhost are always named) or ends within ``RENEW_BEFORE``."""
    now = now or datetime.datetime.now(datetime.UTC)
    directory = data_dir / TLS_DIR
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    files = TlsFiles(directory / CA_CERT_FILE, directory / CERT_FILE, directory / KEY_FILE)
    ca_key_path = directory / CA_KEY_FILE
    names = _hosts(hosts)
    try:
        if files.ca.exists() and ca_key_path.exists():
            ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
            ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        else:
            ca_key = ec.generate_private_key(ec.SECP256R1())
            ca_cert = _ca_certificate(ca_key, now)
            _write(ca_key_path, _key_pem(ca_key))
            _write(files.ca, ca_cert.public_bytes(serialization.Encoding.PEM))
            files.cert.unlink(missing_ok=True)  # signed by a CA that is no more
        if not _current(files, ca_cert, names, now):
            assert isinstance(ca_key, ec.EllipticCurvePrivateKey), type(ca_key)
            key = ec.generate_private_key(ec.SECP256R1())
            cert = _server_certificate(key, ca_key, ca_cert, names, now)
            _write(files.key, _key_pem(key))
            _write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    except (OSError, ValueError) as error:
        raise TlsError(f"cannot prepare the TLS files in {directory}: {error}") from None
    return files


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A listener's context: this certificate and key, TLS 1.2 or later, no client certificates
    asked for (clients prove who they are with SASL, or are ``User:ANONYMOUS``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def client_context(ca: Path | None) -> ssl.SSLContext:
    """A client's context: the server's certificate verified against ``ca`` (None: the system's
    trusted CAs), hostname checked, TLS 1.2 or later."""
    context = ssl.create_default_context(cafile=None if ca is None else str(ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*DEFAULT_HOSTS, *(h for h in hosts if h)]))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _current(files: TlsFiles, ca_cert: x509.Certificate, names: tuple[str, ...],
             now: datetime.datetime) -> bool:
    """The broker certificate exists, is the CA's, names every host and is not near its end."""
    if not (files.cert.exists() and files.key.exists()):
        return False
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    if cert.issuer != ca_cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    if not {_general_name(h) for h in names} <= set(san):
        return False
    return cert.not_valid_after_utc - RENEW_BEFORE > now


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime
                    ) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pylog-nb"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "pylog-nb cluster CA")])
    public = key.public_key()
    return (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256()))


def _server_certificate(key: ec.EllipticCurvePrivateKey, ca_key: ec.EllipticCurvePrivateKey,
                        ca_cert: x509.Certificate, names: tuple[str, ...],
                        now: datetime.datetime) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pylog-nb"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "pylog-nb broker")])
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    not_after = min(now + CERT_VALIDITY, ca_cert.not_valid_after_utc)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in names]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False)
            .sign(ca_key, hashes.SHA256()))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` 0600 through a temporary file, so a reader never sees half of it."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE),
              "wb") as out:
        out.write(data)
    os.chmod(temporary, _FILE_MODE)
    os.replace(temporary, path)
