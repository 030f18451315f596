"""Is a Kafka cluster there? One answer, within a few seconds, before a notebook relies on it.

librdkafka never gives up on a bootstrap address: a typo or a stopped cluster surfaces 10-30 s
later, in whatever call came next, as ``KafkaError{code=_TRANSPORT,...}``. ``check_cluster``
asks once, within ``CONNECT_TIMEOUT_S`` in all, and says in words what is wrong:

1. the list is parsed (HOST:PORT, a port from 1 to 65535) before any network call;
2. a TCP connection to each address tells "refused", "unknown host" and silence apart;
3. a Metadata request, through librdkafka as every later call, proves a Kafka broker answers;
4. each broker the Metadata advertises is connected to as well: a cluster advertising a name
   this machine cannot reach (Docker's ``kafka:9092``) would fail every later call, slowly.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from .config import client_config
from .io import LogClientError

CONNECT_TIMEOUT_S = 3.0  # a broker answers in milliseconds; a user waiting longer learns nothing
ADDRESSES_MAX = 64  # a bootstrap list names a few brokers; a longer one is a pasting mistake
PORT_MAX = 65_535
ADDRESS_SHAPE = "HOST:PORT (e.g. 127.0.0.1:9092), or several separated by commas"
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")  # a name, IPv4, or [IPv6]


@dataclass(frozen=True)
class Address:
    host: str  # IPv6 without its brackets
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bootstrap(text: str) -> list[Address]:
    """Each HOST:PORT of a comma-separated bootstrap list; LogClientError names a bad one."""
    entries = [entry.strip() for entry in text.split(",")]
    if not text.strip() or len(entries) > ADDRESSES_MAX:
        raise LogClientError(f"give {ADDRESS_SHAPE}; at most {ADDRESSES_MAX} addresses")
    return [_address(entry) for entry in entries]


def _address(entry: str) -> Address:
    if not entry:
        raise LogClientError(f"an empty address in the list: give {ADDRESS_SHAPE}")
    host, colon, port = entry.rpartition(":")
    if not colon or not _HOST.fullmatch(host):
        raise LogClientError(f"{entry!r} is not {ADDRESS_SHAPE}")
    if not port.isdigit() or not 1 <= int(port) <= PORT_MAX:
        raise LogClientError(f"{entry!r}: the port must be a number from 1 to {PORT_MAX}")
    return Address(host.strip("[]"), int(port))


def check_cluster(bootstrap: str, timeout_s: float = CONNECT_TIMEOUT_S) -> ClusterMetadata:
    """The cluster's Metadata (brokers, topics), or LogClientError saying in one line what is
    wrong, within about ``timeout_s``."""
    addresses = parse_bootstrap(bootstrap)
    deadline_s = time.monotonic() + timeout_s
    problems = {address: _tcp_problem(address, deadline_s) for address in addresses}
    reachable = [address for address, problem in problems.items() if problem is None]
    if not reachable:
        listed = ", ".join(f"{address} ({problem})" for address, problem in problems.items())
        raise LogClientError(f"no Kafka broker answers at {listed} within {timeout_s:g} s")
    metadata = _metadata(reachable, deadline_s, timeout_s)
    _check_advertised(metadata, bootstrap, deadline_s)
    return metadata


def _metadata(addresses: list[Address], deadline_s: float, timeout_s: float) -> ClusterMetadata:
    servers = ",".join(str(address) for address in addresses)
    admin = AdminClient(client_config(servers))
    try:
        return admin.list_topics(timeout=_remaining_s(deadline_s))
    except KafkaException:
        raise LogClientError(f"no Kafka broker answers at {servers} (the port is open, but no "
                             f"Metadata answer comes) within {timeout_s:g} s") from None


def _check_advertised(metadata: ClusterMetadata, bootstrap: str, deadline_s: float) -> None:
    """Every later request goes to the brokers the cluster advertises, not to ``bootstrap``."""
    for broker in sorted(metadata.brokers.values(), key=lambda b: b.id):
        # confluent_kafka's BrokerMetadata says host is None (its default); the client sets a str
        address = Address(broker.host, broker.port)  # type: ignore[arg-type]
        problem = _tcp_problem(address, deadline_s)
        if problem is not None:
            raise LogClientError(f"{bootstrap} answers, but its broker {broker.id} is advertised "
                                 f"at {address}, which this machine cannot reach ({problem}): "
                                 "the cluster's advertised.listeners must name reachable "
                                 "addresses")


def _tcp_problem(address: Address, deadline_s: float) -> str | None:
    """Why no TCP connection opens to ``address`` before the deadline, in a few words."""
    try:
        with socket.create_connection((address.host, address.port),
                                      timeout=_remaining_s(deadline_s)):
            return None
    except socket.gaierror:
        return "unknown host"
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return "no answer"
    except OSError as error:
        return (error.strerror or type(error).__name__).lower()


def _remaining_s(deadline_s: float) -> float:
    return max(deadline_s - time.monotonic(), 0.001)
