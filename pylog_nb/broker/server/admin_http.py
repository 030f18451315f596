"""The introspection endpoint: read-only HTTP/JSON on loopback, modelled on Redpanda's admin API.

Standard Kafka APIs do not expose what the notebook widgets show (per-replica LEO, HW, log start,
leader epoch, segments), so each broker answers:

    GET /v1/partitions   [{"topic", "partition", "leader", "leader_epoch", "replicas", "isr",
                           "log_start_offset", "high_watermark", "last_stable_offset" (min of
                           the HW and the first offset of an open transaction: where
                           read_committed consumers stop), "open_transactions": [{"producer_id",
                           "first_offset"}], "markers": [{"offset", "type": "COMMIT" |
                           "ABORT", "producer_id"}] (the newest transaction markers in this
                           replica's log, oldest first: offsets no consumer receives),
                           "log_end_offset", "size_bytes",
                           "cleanup_policy", "first_dirty_offset" (where the cleaner
                           has yet to look), "segments": [{"base_offset", "next_offset",
                           "size_bytes"}], "cleaned": [{"from_offset", "to_offset",
                           "records"}] (segments the cleaner has been through: the records
                           compaction kept), "epochs": [{"epoch", "start_offset"}] (the
                           leader-epoch cache: which leader epoch wrote which offsets),
                           "role": "leader" | "follower" | "offline", "proposed_isr",
                           "followers": [{"broker_id", "in_isr", "log_end_offset",
                                          "lag_records", "lag_ms", ...}] (on the leader)}]
    GET /v1/broker       {"broker_id", "host", "port", "cluster_id", "partitions", "live_brokers",
                          "isolated", "lifecycle": {"state": "running" | "recovering" |
                          "registering", "fenced", "applied_offset", "catch_up_offset",
                          "stall_count", ...},
                          "stats": {"messages_in", "bytes_in", "bytes_out",
                                    "replication_bytes_out", ...} (broker/stats.py: traffic
                                    counters since the process started)}
    GET /v1/events       [{"kind", "now_ms", ...}] replication and consumer-group events
    GET /v1/groups       [{"group", "coordinator_partition", "group_type": "classic" |
                           "consumer", "state", "generation", "protocol_type", "protocol",
                           "leader",
                           "members": [{"member_id", "group_instance_id", "client_id",
                                        "client_host", "assignment": {topic: [partitions]}}],
                           "offsets": [{"topic", "partition", "offset", "leader_epoch",
                                        "metadata", "commit_timestamp_ms"}]}]
                         the groups this broker coordinates, of both types. A classic group
                         (JoinGroup/SyncGroup): "assignment" is null unless the group speaks
                         the consumer protocol type. A consumer group (KIP-848,
                         ConsumerGroupHeartbeat) has no generation, protocol or leader (null);
                         instead "group_epoch", "assignment_epoch" (the group epoch its target
                         assignment was computed for) and "assignor" (the server-side assignor;
                         also in "protocol"), and per member, beside the fields above
                         ("assignment": what it owns now, at its epoch): "member_epoch",
                         "previous_member_epoch", "member_state" ("stable",
                         "unrevoked_partitions", "unreleased_partitions": Kafka's MemberState),
                         "pending_revocation" (what it must give up before it may take its
                         target's epoch), "target_assignment" (its part of the group's target
                         assignment), "unreleased_partitions" (of its target, those another
                         member still owns), "subscribed_topic_names",
                         "subscribed_topic_regex", "server_assignor" (the assignor it asked
                         for), "rack_id", "rebalance_timeout_ms" and "revocation_deadline_ms"
                         (while it revokes). Assignments are {topic: [partitions]} by topic
                         name; a topic the metadata no longer has is named by its topic id.
                         A share group (KIP-932, ShareGroupHeartbeat; group_type "share",
                         protocol_type "share", assignor "simple") has "group_epoch",
                         "assignment_epoch" and per member "member_epoch", "assignment" (what
                         it reads; several members may share a partition),
                         "subscribed_topic_names" and "rack_id"; no offsets (its progress is
                         per share partition, below).
    GET /v1/share_partitions
                         [{"group", "topic", "partition", "leader_epoch", "start_offset" (SPSO:
                           below it every record is done with), "end_offset" (exclusive SPEO:
                           from it on nothing was handed out), "state_epoch",
                           "delivery_count_limit", "record_lock_duration_ms",
                           "in_flight_records" (SPEO - SPSO), "counts": {"available",
                           "acquired", "acknowledged", "archived"} (of every in-flight record),
                           "records": [{"offset", "state": "available" | "acquired" |
                           "acknowledged" | "archived", "delivery_count", "member_id",
                           "lock_deadline_ms"}] (the first SHARE_RECORDS_SHOWN_MAX in-flight
                           records from the SPSO; member and deadline only while acquired),
                           "records_beyond" (in-flight records past those),
                           "members_with_sessions": [member ids whose share session here
                           includes the partition]}]
                         the share partitions this broker leads (one per share group reading a
                         partition), by group, topic, partition; lock deadlines on the broker's
                         wall clock (ms)
    GET /v1/connections  {"connections": [{"connection_id", "peer" ("host:port"), "connected_ms",
                           "principal" ("User:alice"; null until it authenticated;
                           "User:ANONYMOUS" on a PLAINTEXT listener), "mechanism" (its SASL
                           mechanism, or null), "client_id" (its newest request header's),
                           "software_name", "software_version" (from ApiVersions v3+, KIP-511;
                           null before or without it), "requests" (served on it),
                           "last_api_key", "last_request_ms", "role": "broker" (the
                           inter-broker user, or a replica's Fetch) | "client"}],
                          "untracked" (live connections past "capacity", not listed),
                          "capacity"}
                         this broker's live client connections, oldest first (connections.py);
                         times on the broker's wall clock (ms). What a client names itself
                         is the client's text: show it as text
    POST /v1/faults/isolate, /v1/faults/heal   cut the broker off from its peers and the
                         controller (clients still reach it), or reconnect it

Requests are bounded (named limits below); anything else gets 404/405/400 and the connection
closes. The server holds no state of its own: every answer is read from the BrokerNode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
from collections.abc import Callable, Iterable, Mapping

from ..group.consumer_group import ConsumerGroup
from ..group.records import assigned_partitions
from ..group.share_groups import ShareGroup
from ..share.persisted import RecordState
from ..share.settings import ShareGroupSettings, share_group_settings
from .config import group_config_defaults
from .node import CLUSTER_ID, BrokerNode

log = logging.getLogger("pylog.broker")

REQUEST_HEAD_BYTES_MAX = 8 * 1024
REQUEST_READ_TIMEOUT_S = 5.0
# In-flight records of one share partition listed in /v1/share_partitions: a view's row of cells
# (Kafka's group.share.partition.max.record.locks lets 2000 be in flight); the rest are counted.
SHARE_RECORDS_SHOWN_MAX = 200
SHARE_ASSIGNOR = "simple"  # Kafka's share-group assignor (ShareGroupDescribe's AssignorName)


def partitions_view(node: BrokerNode) -> list[dict]:
    """Every hosted partition as plain JSON-ready dicts."""
    rows = []
    for (topic, index), partition in sorted(node.replicas.partitions.items()):
        state = node.image.topics[topic].partitions[index]
        plog = partition.log
        rows.append({
            "topic": topic,
            "partition": index,
            "leader": state.leader,
            "leader_epoch": partition.leader_epoch,
            "replicas": list(state.replicas),
            "isr": list(state.isr),
            "log_start_offset": plog.log_start_offset,
            "high_watermark": partition.high_watermark,
            "last_stable_offset": plog.last_stable_offset,
            "open_transactions": [{"producer_id": pid, "first_offset": first}
                                  for pid, first in sorted(
                                      plog.producer_state.ongoing_txns.items(),
                                      key=lambda item: item[1])],
            "markers": [{"offset": m.offset, "type": "COMMIT" if m.commit else "ABORT",
                         "producer_id": m.producer_id} for m in plog.recent_markers],
            "log_end_offset": plog.log_end_offset,
            "size_bytes": plog.size_bytes,
            "cleanup_policy": plog.config.cleanup_policy,
            "first_dirty_offset": plog.first_dirty_offset,
            "segments": [
                {"base_offset": s.base_offset, "next_offset": s.next_offset,
                 "size_bytes": s.size_bytes}
                for s in plog.segments
            ],
            "cleaned": [{"from_offset": start, "to_offset": end, "records": records}
                        for start, end, records in (
                            plog.cleaned_ranges() if plog.config.compact else [])],
            "epochs": [{"epoch": e.epoch, "start_offset": e.start_offset}
                       for e in plog.leader_epoch_cache.entries],
            **_replication(node, partition),
        })
    return rows


def _replication(node: BrokerNode, partition) -> dict:
    """This replica's role; on a leader, each follower's LEO and lag in records and ms."""
    if partition.leader is not None:
        snapshot = partition.leader.snapshot(node.now_ms())
        return {"role": "leader", "proposed_isr": snapshot["proposed_isr"],
                "followers": snapshot["followers"]}
    if partition.follower is not None:
        return {"role": "follower", "fetch_phase": partition.follower.phase.value,
                "followers": []}
    return {"role": "offline", "followers": []}


def broker_view(node: BrokerNode) -> dict:
    return {
        "broker_id": node.broker_id,
        "host": node.config.host,
        "port": node.port,
        "cluster_id": CLUSTER_ID,
        "partitions": len(node.replicas.partitions),
        "live_brokers": node.live_broker_ids(),
        "isolated": node.isolated,
        "lifecycle": node.lifecycle_view() if node.lifecycle_view is not None else None,
        "stats": node.replicas.stats.as_dict(),
    }


def events_view(node: BrokerNode) -> list[dict]:
    """Replication events on this broker, oldest first: HW moves, ISR requests, truncations."""
    return [{"kind": type(e).__name__, **dataclasses.asdict(e)} for e in node.events]


def groups_view(node: BrokerNode) -> list[dict]:
    """The groups this broker coordinates, classic, consumer (KIP-848) and share (KIP-932)
    alike, by ``__consumer_offsets`` partition then group id, with members, assignments and
    offsets."""
    names = {str(topic.uuid): name for name, topic in node.image.topics.items()}
    rows = []
    for partition, core in sorted(node.groups.cores.items()):
        classic = [(g.group_id, _group_row(partition, g)) for g in core.groups.values()]
        consumer = [(g.group_id, _consumer_group_row(partition, g, names))
                    for g in core.consumer_groups.values()]
        share = [(g.group_id, _share_group_row(partition, g, names))
                 for g in core.share_groups.values()]
        rows += [row for _group_id, row in sorted(classic + consumer + share,
                                                   key=lambda r: r[0])]
    return rows


def _group_row(partition: int, group) -> dict:
    consumer = group.protocol_type == "consumer"
    return {
        "group": group.group_id,
        "coordinator_partition": partition,
        "group_type": "classic",
        "state": group.state.value,
        "generation": group.generation,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol_name,
        "leader": group.leader_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "client_id": m.client_id, "client_host": m.client_host,
             "assignment": assigned_partitions(m.assignment) if consumer else None}
            for m in group.members.values()
        ],
        "offsets": _offsets(group),
    }


def _offsets(group) -> list[dict]:
    return [
        {"topic": topic, "partition": index, "offset": value.offset,
         "leader_epoch": value.leader_epoch, "metadata": value.metadata,
         "commit_timestamp_ms": value.commit_timestamp_ms}
        for (topic, index), value in sorted(group.offsets.items())
    ]


def _consumer_group_row(partition: int, group: ConsumerGroup, names: Mapping[str, str]) -> dict:
    """A KIP-848 consumer group: its epochs, and each member's epoch, state and partitions (what
    it owns, what it must revoke, its target), as ConsumerGroupDescribe and a little more."""
    owners = {owned: member_id for member_id, member in group.members.items()
              for owned in member.owned()}

    def named(assignment: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
        return _named(assignment, names)

    def member_row(member_id: str) -> dict:
        member = group.members[member_id]
        target = group.target.get(member_id, {})
        unreleased = {topic_id: [p for p in partitions
                                 if owners.get((topic_id, p), member_id) != member_id]
                      for topic_id, partitions in target.items()}
        return {
            "member_id": member_id, "group_instance_id": member.instance_id,
            "client_id": member.client_id, "client_host": member.client_host,
            "assignment": named(member.assigned),
            "member_epoch": member.member_epoch,
            "previous_member_epoch": member.previous_member_epoch,
            "member_state": member.state.name.lower(),
            "pending_revocation": named(member.pending_revocation),
            "target_assignment": named(target),
            "unreleased_partitions": named(unreleased),
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "server_assignor": member.server_assignor, "rack_id": member.rack_id,
            "rebalance_timeout_ms": member.rebalance_timeout_ms,
            "revocation_deadline_ms": member.revocation_deadline_ms,
            # KIP-848's migration: a classic consumer served by this consumer group
            "member_type": "classic" if member.uses_classic_protocol else "consumer",
        }

    return {
        "group": group.group_id,
        "coordinator_partition": partition,
        "group_type": "consumer",
        "state": group.state.value,
        "generation": None,
        "protocol_type": group.PROTOCOL_TYPE,
        "protocol": group.assignor_name,
        "leader": None,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor": group.assignor_name,
        "members": [member_row(member_id) for member_id in sorted(group.members)],
        "offsets": _offsets(group),
    }


def _named(assignment: Mapping[str, Iterable[int]], names: Mapping[str, str]
           ) -> dict[str, list[int]]:
    """{topic id: partitions} as {topic name: sorted partitions} (an unknown id stays an id)."""
    by_name: dict[str, list[int]] = {}
    for topic_id, partitions in assignment.items():
        if partitions:
            name = names.get(topic_id, topic_id)
            by_name[name] = sorted({*by_name.get(name, []), *partitions})
    return dict(sorted(by_name.items()))


def _share_group_row(partition: int, group: ShareGroup, names: Mapping[str, str]) -> dict:
    """A KIP-932 share group as ShareGroupDescribe has it: its epochs, and each member's epoch
    and the partitions it reads (a partition may be any number of members')."""
    return {
        "group": group.group_id,
        "coordinator_partition": partition,
        "group_type": group.GROUP_TYPE,
        "state": group.state.value,
        "generation": None,
        "protocol_type": group.PROTOCOL_TYPE,
        "protocol": SHARE_ASSIGNOR,
        "leader": None,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor": SHARE_ASSIGNOR,
        "members": [
            {"member_id": member_id, "group_instance_id": None,
             "client_id": member.client_id, "client_host": member.client_host,
             "assignment": _named(member.assigned, names),
             "member_epoch": member.member_epoch,
             "subscribed_topic_names": list(member.subscribed_topic_names),
             "rack_id": member.rack_id}
            for member_id, member in sorted(group.members.items())
        ],
        "offsets": [],
    }


def share_partitions_view(node: BrokerNode) -> list[dict]:
    """The share partitions this broker leads: where each starts and ends, its limits, how many
    records are in each state, and its first ``SHARE_RECORDS_SHOWN_MAX`` in-flight records."""
    shares = node.core.shares
    sessions: dict[tuple[str, tuple[str, int]], list[str]] = {}
    for (group_id, member_id), session in sorted(shares.sessions.items()):
        for topic_partition in session.partitions:
            sessions.setdefault((group_id, topic_partition), []).append(member_id)
    rows = []
    for (group_id, (topic, index)), share in sorted(shares.partitions.items()):
        counts = dict.fromkeys(_STATE_NAMES.values(), 0)
        for record in share.records_view():
            counts[_STATE_NAMES[record.state]] += 1
        shown = share.records_view(SHARE_RECORDS_SHOWN_MAX)
        replica = node.replicas.partitions.get((topic, index))
        rows.append({
            "group": group_id, "topic": topic, "partition": index,
            "leader_epoch": None if replica is None else replica.leader_epoch,
            "start_offset": share.start_offset, "end_offset": share.end_offset,
            "state_epoch": share.state_epoch,
            "delivery_count_limit": share.config.delivery_count_limit,
            "record_lock_duration_ms": _share_settings(node, group_id).record_lock_duration_ms,
            "in_flight_records": share.in_flight_records,
            "counts": counts,
            "records": [{"offset": r.offset, "state": _STATE_NAMES[r.state],
                         "delivery_count": r.delivery_count, "member_id": r.member_id,
                         "lock_deadline_ms": r.lock_deadline_ms} for r in shown],
            "records_beyond": share.in_flight_records - len(shown),
            "members_with_sessions": sessions.get((group_id, (topic, index)), []),
        })
    return rows


_STATE_NAMES = {state: state.name.lower() for state in RecordState}


def connections_view(node: BrokerNode) -> dict:
    """Who is connected to this broker now, as its network shell keeps it (connections.py)."""
    return node.client_connections.view()


def _set_isolated(isolated: bool) -> Callable[[BrokerNode], object]:
    def apply(node: BrokerNode) -> dict:
        node.isolated = isolated
        log.warning("fault injection: broker %s", "isolated" if isolated else "healed")
        return {"isolated": node.isolated}
    return apply


ROUTES: dict[str, Callable[[BrokerNode], object]] = {
    "/v1/partitions": partitions_view,
    "/v1/broker": broker_view,
    "/v1/events": events_view,
    "/v1/groups": groups_view,
    "/v1/share_partitions": share_partitions_view,
    "/v1/connections": connections_view,
}
FAULT_ROUTES: dict[str, Callable[[BrokerNode], object]] = {
    "/v1/faults/isolate": _set_isolated(True),
    "/v1/faults/heal": _set_isolated(False),
}


class AdminHttpServer:
    def __init__(self, node: BrokerNode) -> None:
        self.node = node
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int = 0) -> int:
        self.server = await asyncio.start_server(
            self._serve, host, port, reuse_address=True, limit=REQUEST_HEAD_BYTES_MAX
        )
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_READ_TIMEOUT_S)
            status, payload = self._answer(head)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            status, payload = 400, {"error": "malformed or oversized request"}
        except Exception as error:
            log.exception("admin endpoint failed")
            status, payload = 500, {"error": str(error)}
        body = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
        try:
            await writer.drain()
        finally:
            writer.close()

    def _answer(self, head: bytes) -> tuple[int, object]:
        if len(head) > REQUEST_HEAD_BYTES_MAX:
            return 400, {"error": "request head too large"}
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3:
            return 400, {"error": "malformed request line"}
        method, target, _version = parts
        if not self._authorized(head):
            return 401, {"error": "this endpoint needs the cluster's admin token "
                                  "(Authorization: Bearer ...)"}
        path = target.split("?", 1)[0]
        routes = FAULT_ROUTES if path in FAULT_ROUTES else ROUTES
        route = routes.get(path)
        if route is None:
            return 404, {"error": f"unknown path {target[:100]}",
                         "paths": sorted([*ROUTES, *FAULT_ROUTES])}
        wanted = "POST" if routes is FAULT_ROUTES else "GET"
        if method != wanted:
            return 405, {"error": f"{path} takes {wanted}"}
        return 200, route(self.node)

    def _authorized(self, head: bytes) -> bool:
        """Whether the request carries the admin token (always, when the cluster has none)."""
        secrets = self.node.secrets
        if secrets is None:
            return True
        expected = f"bearer {secrets.admin_http_token}".encode()
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                scheme, _, token = value.strip().partition(b" ")
                return hmac.compare_digest(scheme.lower() + b" " + token.strip(), expected)
        return False


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}


def _share_settings(node: BrokerNode, group_id: str) -> ShareGroupSettings:
    """The group's lock duration and the rest, its group configs over this broker's."""
    return share_group_settings(node.core.image.group_configs.get(group_id, {}),
                                group_config_defaults(node.config))
