"""The table of a broker's live connections (connections.py), without sockets."""

from __future__ import annotations

import json

from pylog_nb.broker.protocol.versions import API_VERSIONS_KEY, FETCH_KEY, PRODUCE_KEY
from pylog_nb.broker.server.connections import (
    CLIENT_TEXT_MAX,
    CONNECTIONS_TRACKED_MAX,
    ConnectionTable,
)

BROKER_PRINCIPAL = "User:pylog-broker"


def _row(table: ConnectionTable, connection_id: str) -> dict:
    rows = {row["connection_id"]: row for row in table.view()["connections"]}
    return rows[connection_id]


def test_a_connection_is_listed_from_accept_to_close_with_what_it_said():
    table = ConnectionTable(BROKER_PRINCIPAL)
    assert table.add("c1", "127.0.0.1:5000", now_ms=1_000)
    assert _row(table, "c1") == {
        "connection_id": "c1", "peer": "127.0.0.1:5000", "connected_ms": 1_000,
        "principal": None, "mechanism": None, "client_id": None, "software_name": None,
        "software_version": None, "requests": 0, "last_api_key": None,
        "last_request_ms": None, "role": "client"}
    table.on_request("c1", API_VERSIONS_KEY, "rdkafka", 1_010,
                     software=("confluent-kafka-python", "2.6.0-rdkafka-2.6.0"))
    table.signed_in("c1", "User:alice", "SCRAM-SHA-512")
    table.on_request("c1", PRODUCE_KEY, "orders-producer", 1_020)
    row = _row(table, "c1")
    assert (row["principal"], row["mechanism"]) == ("User:alice", "SCRAM-SHA-512")
    assert (row["client_id"], row["software_name"], row["software_version"]) == (
        "orders-producer", "confluent-kafka-python", "2.6.0-rdkafka-2.6.0")
    assert (row["requests"], row["last_api_key"], row["last_request_ms"]) == (
        2, PRODUCE_KEY, 1_020)
    assert row["role"] == "client"
    table.remove("c1")
    assert table.view()["connections"] == []
    json.dumps(table.view())  # what the admin endpoint sends as it is


def test_the_inter_broker_user_and_a_replica_fetch_mark_a_broker():
    table = ConnectionTable(BROKER_PRINCIPAL)
    table.add("peer", "127.0.0.1:1", 1)
    table.signed_in("peer", BROKER_PRINCIPAL, "SCRAM-SHA-512")
    table.add("plain-peer", "127.0.0.1:2", 2)
    table.signed_in("plain-peer", "User:ANONYMOUS", None)
    table.on_request("plain-peer", FETCH_KEY, "broker-2-fetcher", 3, from_broker=True)
    table.add("client", "127.0.0.1:3", 4)
    table.signed_in("client", "User:admin", "SCRAM-SHA-512")
    table.on_request("client", FETCH_KEY, "consumer", 5)
    assert [(r["connection_id"], r["role"]) for r in table.view()["connections"]] == [
        ("peer", "broker"), ("plain-peer", "broker"), ("client", "client")]


def test_without_an_inter_broker_user_no_principal_is_a_broker():
    table = ConnectionTable(None)
    table.add("c", "h:1", 1)
    table.signed_in("c", "User:ANONYMOUS", None)
    assert _row(table, "c")["role"] == "client"


def test_the_table_is_bounded_and_counts_the_connections_past_its_capacity():
    assert CONNECTIONS_TRACKED_MAX >= 100
    table = ConnectionTable(capacity=2)
    assert [table.add(f"c{n}", "h:1", n) for n in range(4)] == [True, True, False, False]
    assert (len(table), table.view()["untracked"], table.view()["capacity"]) == (2, 2, 2)
    table.on_request("c3", PRODUCE_KEY, "x", 9)  # an untracked connection leaves no row
    table.signed_in("c3", "User:x", None)
    table.remove("c3", tracked=False)
    assert table.view()["untracked"] == 1
    table.remove("c0")
    assert table.add("c4", "h:1", 10)  # room again: listed
    assert [r["connection_id"] for r in table.view()["connections"]] == ["c1", "c4"]


def test_what_a_client_names_itself_is_kept_short():
    table = ConnectionTable()
    table.add("c", "h:1", 1)
    table.on_request("c", API_VERSIONS_KEY, "i" * 10_000, 2, software=("n" * 10_000, None))
    row = _row(table, "c")
    assert len(row["client_id"]) == len(row["software_name"]) == CLIENT_TEXT_MAX
    assert row["software_version"] is None


def test_removing_an_unknown_connection_is_harmless():
    table = ConnectionTable()
    table.remove("never")
    table.remove("never", tracked=False)
    assert table.view() == {"connections": [], "untracked": 0, "capacity": CONNECTIONS_TRACKED_MAX}
