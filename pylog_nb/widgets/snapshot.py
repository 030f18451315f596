"""One picture of a LocalCluster, as plain data: brokers, partitions with every replica's
offsets, consumer groups with lag, recent events. The widgets render it; tests read it.

Internal topics (``__consumer_offsets``) are left out unless asked for (``internal=True``):
their partitions only counted in ``folded``, their events dropped, so the user's own topics
and the elections that matter are not drowned. Events that every produce causes (HW moves)
or that another event already says (a broker's RoleChanged after the controller's election)
are left out too; the rest carry a ``category`` the timeline colours them by.

Only what changes when the cluster changes goes in (no "lag in ms", no wall-clock ages), so two
snapshots of an idle cluster are equal and an unchanged view sends the browser nothing. A
follower's lag is its lag in records and the time it has been behind *since*
(``behind_since_ms``, the leader's last-caught-up time, fixed while it stays behind): the
browser turns that into seconds. A truncation is shown on its replica for
``TRUNCATED_SHOWN_MS`` after it happened; the snapshot changes once more when it expires.

Each replica carries its last stable offset (``last_stable_offset``: where read_committed
consumers stop) and its open transactions (``open_transactions``: ``[producer_id,
first_offset]`` pairs, oldest first); the LSO is below the HW exactly while an open transaction
begins below the HW. Its newest transaction markers (``markers``: ``[offset, "COMMIT" | "ABORT",
producer_id]``, oldest first, as its broker reports them) are the offsets of control batches:
offsets no consumer receives.

Each replica carries its leader-epoch cache (``epochs``: ``[epoch, start_offset]`` pairs, which
leader epoch wrote which offsets), so its bar can be coloured by epoch per offset range; a
replica of a compacted topic carries the segments its cleaner went through (``cleaned``:
``[from_offset, to_offset, records kept]``), the gaps compaction left.

A partition's leader, epoch and ISR are the controller's (``client.introspect.authority_of``),
never whichever broker answered: a replica whose own view differs keeps its role and epoch and
gets a ``disagreement`` text. A broker that does not answer (paused, down) keeps the replica
state it last reported, marked ``last_known``, so its column neither empties nor reflows; its
``disagreement`` says what it last claimed, in the past, and its lag is left out (unknown: it
answers nothing). The broker carries ``silent_since_ms``, when the view first found it silent,
kept from snapshot to snapshot while it stays silent (so the snapshot of an idle cluster with a
dead broker still repeats itself).

The controllers (a Raft quorum, ``LocalCluster.controller_views``) get the same honesty: one
entry per controller with what it says of itself (role, epoch, the leader it knows, its committed
offset and log end) and its lag as the active controller reports it. One that does not answer
keeps what it last said, ``last_known``; a leader's claim at an epoch below the newest any
controller reports is ``stale``, never a second active controller. The active one is the
answering leader whose epoch has begun at the highest epoch (as ``LocalCluster`` finds it).
The controllers' events say nothing of who leads the quorum, so that is derived here from
successive snapshots: "controller N became active (epoch E)", or that none is, stamped with
the time the view saw it and carried on from snapshot to snapshot like the others.

Groups are of two types (``group_type``). A classic group's row is as it always was, with
``spark_query``: what a Spark query committing its progress there said of itself in its commits'
metadata (the pylog source's ``kafka.group.id``), else None. A consumer
group (KIP-848's consumer protocol) adds its group and assignment epochs, its assignor and, per
member (``consumer_members``), its member epoch, Kafka's member state and its partitions: owned,
pending revocation, target, and of the target those another member has not released. No process
reports the steps of its incremental rebalance as events, so they are derived the same way, from
successive snapshots (``_consumer_group_events``): the group epoch bumped, the target assignment
computed, a member told to revoke and having revoked, a member caught up to an epoch, partitions
released to a member, the group's state. Steps that fall between two snapshots share one time
and are listed in the order they must have happened.

A share group (KIP-932, ``group_type`` "share") adds its epochs, its members
(``share_members``: epoch, the partitions each reads) and its share partitions
(``share_partitions``, from each partition's leader: the start and end offsets, the leader
replica's log start, HW and LEO, the limits, how many records are in each state, and the first
in-flight records as ``[offset, state, delivery count, member id, lock deadline]``). What
happened to records is not reported by any process either, so it is derived from successive
snapshots too (``_share_group_events``): a member joined or left; acquired records came back to
the group (the member left, its lock ran out, or it released them); a record was archived
(rejected, or delivered as often as the delivery limit allows). A record settled and gone below
the start offset between two snapshots is archived only if that is certain (it came back at the
limit); otherwise it may have been accepted, and nothing is said.

Clients (``clients``, one entry per broker, from ``GET /v1/connections``): who is connected to
each broker now, grouped by principal (``User:alice``; None: not signed in yet): how many
connections, since when (the oldest), their client ids, client software (KIP-511's name and
version), hosts and SASL mechanisms. The brokers' own connections to each other are one line,
``brokers``. Request counts are left out (they change with every request); a broker that does
not answer has ``answering`` False and no clients (what it serves, if anything, is unknown).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..client.groups import spark_query_of
from ..client.introspect import (
    Authority,
    PartitionTruth,
    authority_from_brokers,
    authority_from_controller,
    disagreement,
    merge_groups,
)
from ..client.shares import SHARE_GROUP_TYPE, merge_share_partitions, share_partition_claims
from ..cluster import ClusterError, LocalCluster

EVENTS_SHOWN = 20  # the newest notable events; the view's timeline keeps older ones as marks
TRUNCATED_SHOWN_MS = 30_000  # long enough to look at the bar, short enough not to pass for now
TRUNCATIONS_SHOWN_MAX = 3  # per replica: the newest; a flapping follower would stack more
CLEANED_SHOWN_MAX = 64  # per replica, the newest cleaned segments (their compaction gaps)
MARKERS_SHOWN_MAX = 64  # per replica, the newest commit/abort markers (the broker keeps as many)
EPOCHS_SHOWN_MAX = 64  # per replica, the newest: more ranges than a bar has pixels to colour
# Controller events about a whole topic name it only in their text ("topic t created"); the
# partition events carry ``topic`` and ``partition`` fields and are folded by those.
TOPIC_EVENT_KINDS = ("topic_created", "topic_deleted", "config_changed")
# The traffic counters the charts turn into rates (Kafka's BrokerTopicMetrics, broker/stats.py).
STATS_SHOWN = ("messages_in", "bytes_in", "bytes_out", "replication_bytes_out")
LAG_FIELDS = ("lag_records", "behind_since_ms")  # a follower's lag, as its leader measures it
INTERNAL_PREFIX = "__"  # Kafka's internal topics: __consumer_offsets, __transaction_state

# Event kind -> timeline category; kinds named None are left out (see the module docstring).
EVENT_CATEGORIES = {
    "leader_elected": "election", "leader_offline": "election",
    "isr_shrink": "isr", "isr_expand": "isr", "isr_change": "isr", "RequestIsrChange": "isr",
    "broker_registered": "broker", "broker_restarted": "broker", "broker_fenced": "broker",
    "broker_unfenced": "broker",
    "Truncated": "truncation",
    "GroupStateChanged": "group", "MemberRemoved": "group",
    "topic_created": "topic", "partition_created": "topic", "topic_deleted": "topic",
    "config_changed": "topic",
    "HighWatermarkAdvanced": None, "IsrCommitted": None, "RoleChanged": None,
    "producer_ids": None,
    # derived here from successive snapshots (_quorum_events, _consumer_group_events), not
    # told by any process
    "controller_elected": "controller", "controller_lost": "controller",
    "group_epoch_bumped": "group", "target_assignment_computed": "group",
    "member_revoking": "group", "member_revoked": "group", "member_caught_up": "group",
    "member_assigned": "group", "consumer_group_state": "group",
    "share_member_joined": "share", "share_member_left": "share",
    "share_records_returned": "share", "share_records_archived": "share",
    # refusals (broker/security/events.py): a failed sign-in, an operation the ACLs deny
    "AuthenticationFailed": "security", "AuthorizationFailed": "security",
}
QUORUM_EVENT_KINDS = ("controller_elected", "controller_lost")
CONSUMER_GROUP_EVENT_KINDS = ("group_epoch_bumped", "target_assignment_computed",
                              "member_revoking", "member_revoked", "member_caught_up",
                              "member_assigned", "consumer_group_state")
SHARE_GROUP_EVENT_KINDS = ("share_member_joined", "share_member_left",
                           "share_records_returned", "share_records_archived")
DERIVED_EVENT_KINDS = QUORUM_EVENT_KINDS + CONSUMER_GROUP_EVENT_KINDS + SHARE_GROUP_EVENT_KINDS
QUORUM_EVENT_SOURCE = "view"  # the kernel saw it between two snapshots (as history.py's marks)
CONSUMER_GROUP_TYPE = "consumer"  # a KIP-848 group (the admin endpoint's group_type)
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2  # a static member left and keeps its partitions (KIP-848)
MEMBER_ID_SHOWN = 8  # characters of a member id the events name (a UUID's 22 in base64)
TARGET_MEMBERS_NAMED = 6  # a target assignment's event names this many members' parts
# A consumer-group member's partitions in the snapshot, from the admin endpoint's fields.
MEMBER_PARTITION_FIELDS = (("assignment", "assignment"),
                           ("pending_revocation", "pending_revocation"),
                           ("target_assignment", "target_assignment"),
                           ("unreleased", "unreleased_partitions"))
QUORUM_FIELDS = ("role", "active", "epoch", "leader_id", "high_watermark", "log_end_offset")
PRINCIPALS_SHOWN_MAX = 20  # per broker, the principals listed by name (the rest are counted)
CLIENT_VALUES_SHOWN_MAX = 8  # per principal, the client ids, software or hosts listed
BROKER_ROLE = "broker"  # a connection of the brokers' own (the admin endpoint's role)


def take_snapshot(cluster: LocalCluster, previous: dict | None = None,
                  internal: bool = False, now_ms: int | None = None,
                  previous_ms: int | None = None) -> dict:
    """Brokers, partitions, groups and the latest events of ``cluster``; replicas of brokers
    that do not answer now come from ``previous`` (the last snapshot), marked ``last_known``.
    Internal topics are counted in ``folded`` unless ``internal``. ``now_ms`` (wall clock,
    default now) decides which truncations are still shown; with ``previous_ms``, when
    ``previous`` was taken, each broker's traffic rates are measured since then."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    previous = previous or {}
    controllers, active = _controllers(cluster.controller_views(), previous)
    replicas = cluster.describe()
    truth, fenced = _authority(cluster, replicas)
    views = cluster.broker_views()
    states = {broker_id: state for broker_id, (state, _view) in views.items()}
    events = cluster.events()
    partitions = _partitions(replicas, truth, states, previous, internal)
    _add_follower_lag(partitions, replicas, truth)
    _add_truncations(partitions, events, now_ms)
    claims = cluster.groups()
    shares = (share_partition_claims(cluster)
              if any(g.get("group_type") == SHARE_GROUP_TYPE for g in claims) else {})
    groups = _groups(claims, replicas, truth, shares)
    derived = [e for e in previous.get("events", []) if e["kind"] in DERIVED_EVENT_KINDS]
    derived += _quorum_events(previous, controllers, active, now_ms)
    derived += _consumer_group_events(previous, groups, now_ms)
    derived += _share_group_events(previous, groups, now_ms)
    clients = _clients(states, cluster.connections())
    return {
        "brokers": _brokers(views, fenced, previous, now_ms,
                            None if previous_ms is None else now_ms - previous_ms),
        "controllers": controllers,
        "active_controller": active,
        "authority": truth.source,
        "partitions": partitions,
        "folded": {} if internal else _folded(truth, replicas),
        "groups": groups,
        "clients": clients,
        "events": _events(events, internal, derived),
    }


def _clients(states: dict[int, str], connections: dict[int, dict]) -> list[dict]:
    """Per broker, its connections grouped by principal, the brokers' own as one line (see the
    module docstring)."""
    shown = []
    for broker_id in sorted(states):
        view = connections.get(broker_id)
        if view is None:
            shown.append({"broker_id": broker_id, "answering": False, "principals": [],
                          "principals_more": 0, "brokers": None, "untracked": 0})
            continue
        by_principal: dict[str | None, list[dict]] = {}
        peers: list[dict] = []
        for row in view["connections"]:
            if row["role"] == BROKER_ROLE:
                peers.append(row)
            else:
                by_principal.setdefault(row["principal"], []).append(row)
        names = sorted(by_principal, key=lambda p: (p is None, p or ""))
        shown.append({
            "broker_id": broker_id, "answering": True,
            "principals": [_principal_entry(name, by_principal[name])
                           for name in names[:PRINCIPALS_SHOWN_MAX]],
            "principals_more": max(0, len(names) - PRINCIPALS_SHOWN_MAX),
            "brokers": None if not peers else {
                "connections": len(peers), "since_ms": min(r["connected_ms"] for r in peers),
                "principals": sorted({r["principal"] for r in peers if r["principal"]})},
            "untracked": view.get("untracked", 0),
        })
    return shown


def _principal_entry(principal: str | None, rows: list[dict]) -> dict:
    """One principal's connections to a broker: how many, since when, and what they said."""
    def listed(values) -> tuple[list[str], int]:
        distinct = sorted({v for v in values if v})
        return distinct[:CLIENT_VALUES_SHOWN_MAX], max(0, len(distinct) - CLIENT_VALUES_SHOWN_MAX)

    client_ids, client_ids_more = listed(r["client_id"] for r in rows)
    software, _ = listed(" ".join(part for part in (r["software_name"], r["software_version"])
                                  if part) for r in rows)
    hosts, _ = listed(r["peer"].rsplit(":", 1)[0] for r in rows)
    mechanisms, _ = listed(r["mechanism"] for r in rows)
    return {"principal": principal, "connections": len(rows),
            "since_ms": min(r["connected_ms"] for r in rows),
            "client_ids": client_ids, "client_ids_more": client_ids_more,
            "software": software, "hosts": hosts, "mechanisms": mechanisms}


def _controllers(views: dict[int, tuple[str, dict | None]],
                 previous: dict) -> tuple[list[dict], dict | None]:
    """One entry per controller, and the active one (``{"controller_id", "epoch"}``, or None).

    An entry is what the controller says of itself now, or, while it does not answer (paused,
    down), what it said last (``last_known``; all None if it never answered). ``lag`` is its
    distance in records from the active controller's log end, as that one reports it (None
    without an active controller answering). ``stale``: it claims (or last claimed) to lead at
    an epoch below the newest any controller reports, so that claim is over."""
    before = {c["controller_id"]: c for c in previous.get("controllers", [])}
    entries = []
    for controller_id, (state, quorum) in views.items():
        old = before.get(controller_id)
        if quorum is not None:
            entry = {"controller_id": controller_id, "state": state,
                     **{field: quorum[field] for field in QUORUM_FIELDS}, "last_known": False}
        elif old is not None and old["role"] is not None:
            entry = {**old, "state": state, "last_known": True}
        else:
            entry = {"controller_id": controller_id, "state": state,
                     **dict.fromkeys(QUORUM_FIELDS), "last_known": False}
            entry["active"] = False
        entries.append(entry)
    claims = [(e["epoch"], e["controller_id"]) for e in entries
              if not e["last_known"] and e["active"] and e["role"] == "leader"]
    epoch, active_id = max(claims) if claims else (None, None)
    lags = {}
    if active_id is not None:
        reported = views[active_id][1]
        assert reported is not None  # it answered: it is a claim
        lags = reported.get("voter_lag", {})
    newest = max((e["epoch"] for e in entries if e["epoch"] is not None), default=None)
    for entry in entries:
        entry["lag"] = lags.get(str(entry["controller_id"]))
        entry["stale"] = bool(entry["role"] == "leader" and newest is not None
                              and entry["epoch"] < newest)
    active = None if active_id is None else {"controller_id": active_id, "epoch": epoch}
    return entries, active


def _quorum_events(previous: dict, controllers: list[dict], active: dict | None,
                   now_ms: int) -> list[dict]:
    """An event when the active controller differs from ``previous``'s: a new one (or the same
    at a new epoch) became active, or none is. Nothing on a first snapshot: no change seen."""
    if "active_controller" not in previous or previous["active_controller"] == active:
        return []
    was = previous["active_controller"]
    if active is None:
        assert was is not None
        states = {c["controller_id"]: c["state"] for c in controllers}
        kind = "controller_lost"
        text = (f"no controller is active: controller {was['controller_id']} led at epoch "
                f"{was['epoch']} and is {states.get(was['controller_id'], 'gone')} now")
    else:
        kind = "controller_elected"
        text = f"controller {active['controller_id']} became active (epoch {active['epoch']})"
        if was is not None:
            text += f", after controller {was['controller_id']} (epoch {was['epoch']})"
    return [{"now_ms": now_ms, "source": QUORUM_EVENT_SOURCE, "kind": kind,
             "category": EVENT_CATEGORIES[kind], "topic": "", "text": text}]


def _authority(cluster: LocalCluster,
               replicas: dict[int, list[dict]]) -> tuple[Authority, set[int]]:
    """``client.introspect.authority_of``, and the brokers the controller has fenced, out of
    one call to the controller."""
    from pylog_nb.broker.controller.rpc import ControllerRpcError

    try:
        described = cluster.controller_describe()
    except (OSError, ValueError, ClusterError, ControllerRpcError):  # killed, restarting
        return authority_from_brokers(replicas, "newest claim"), set()
    fenced = {b["broker_id"] for b in described.get("brokers", []) if b.get("fenced")}
    return authority_from_controller(described), fenced


def _brokers(views: dict[int, tuple[str, dict | None]], fenced: set[int], previous: dict,
             now_ms: int, elapsed_ms: int | None) -> list[dict]:
    """Each broker's state, whether the controller fenced it, since when it does not answer
    (``silent_since_ms``: the first snapshot that found it silent; only while it is), its traffic
    counters since it started (``broker/stats.py``; None while it does not answer) and their
    rates per second since ``previous`` (``elapsed_ms`` ago; None when not known: no earlier
    reading, or the broker restarted and its counters began again)."""
    before = {b["broker_id"]: b for b in previous.get("brokers", [])}
    brokers = []
    for broker_id, (state, view) in views.items():
        old = before.get(broker_id, {})
        stats = None
        if view is not None and "stats" in view:
            stats = {name: view["stats"][name] for name in STATS_SHOWN}
        broker = {"broker_id": broker_id, "state": state, "fenced": broker_id in fenced,
                  "stats": stats, "rates": _rates(old.get("stats"), stats, elapsed_ms)}
        if view is None:  # kept from the snapshot that first found it silent
            broker["silent_since_ms"] = old.get("silent_since_ms") or now_ms
        brokers.append(broker)
    return brokers


def _rates(before: dict | None, after: dict | None, elapsed_ms: int | None) -> dict | None:
    """Per second, rounded (so an idle broker's rates are exactly 0 and its snapshot repeats)."""
    if before is None or after is None or elapsed_ms is None:
        return None
    if before == after:
        return {f"{name}_per_s": 0 for name in STATS_SHOWN}
    if elapsed_ms <= 0 or any(after[name] < before[name] for name in STATS_SHOWN):
        return None  # no time to measure over, or a new process whose counters began again
    return {f"{name}_per_s": round((after[name] - before[name]) * 1000 / elapsed_ms)
            for name in STATS_SHOWN}


def _internal(topic: str) -> bool:
    return topic.startswith(INTERNAL_PREFIX)


def _folded(truth: Authority, replicas: dict[int, list[dict]]) -> dict[str, int]:
    """Per internal topic, how many partitions the view leaves out."""
    keys = set(truth.partitions) | {(r["topic"], r["partition"])
                                    for rows in replicas.values() for r in rows}
    folded: dict[str, int] = {}
    for topic, _partition in keys:
        if _internal(topic):
            folded[topic] = folded.get(topic, 0) + 1
    return dict(sorted(folded.items()))


def _partitions(replicas: dict[int, list[dict]], truth: Authority, states: dict[int, str],
                previous: dict, internal: bool = False) -> list[dict]:
    """One row per (topic, partition): the authority's leader, epoch and ISR, and each
    replica's own view and offsets."""
    merged: dict[tuple[str, int], dict] = {}
    known: PartitionTruth | None
    for key, known in truth.partitions.items():
        if internal or not _internal(key[0]):
            merged[key] = _partition_entry(key, known)
    for broker_id, rows in sorted(replicas.items()):
        for row in rows:
            key = (row["topic"], row["partition"])
            if _internal(key[0]) and not internal:
                continue
            entry = merged.setdefault(key, _partition_entry(key, truth.partitions.get(key)))
            entry["replicas"][broker_id] = _replica(row)
    _keep_last_known(merged, previous, set(replicas), truth.source == "controller", internal)
    for key, entry in merged.items():
        known = truth.partitions.get(key)
        for broker_id, replica in entry["replicas"].items():
            if known is None and replica["last_known"]:
                continue  # nothing newer to compare with: keep what the last snapshot said
            replica["disagreement"] = disagreement(
                broker_id, replica, known, truth.source, states.get(broker_id) == "isolated",
                silent=replica["last_known"])
    return [merged[key] for key in sorted(merged)]


def _keep_last_known(merged: dict, previous: dict, answering: set[int],
                     complete: bool, internal: bool = False) -> None:
    """Add to ``merged`` the replicas of brokers that do not answer now, as ``previous`` had
    them. When ``complete`` (the controller's image lists every partition) a partition missing
    from ``merged`` was deleted; otherwise it may just live on brokers that do not answer."""
    for entry in previous.get("partitions", []):
        key = (entry["topic"], entry["partition"])
        if _internal(key[0]) and not internal:
            continue  # shown when the last snapshot was taken, folded now
        silent = {b: _silent(replica)
                  for b, replica in entry["replicas"].items() if b not in answering}
        if key in merged:
            merged[key]["replicas"].update(silent)
        elif silent and not complete:
            merged[key] = {**entry, "replicas": silent}


def _silent(replica: dict) -> dict:
    """A replica as its broker last reported it, now that the broker does not answer: marked
    ``last_known``, without a lag (no one knows how far behind a silent process is)."""
    kept = {name: value for name, value in replica.items() if name not in LAG_FIELDS}
    return {**kept, "last_known": True}


def _partition_entry(key: tuple[str, int], known) -> dict:
    if known is None:  # a broker hosts a partition the authority does not know
        return {"topic": key[0], "partition": key[1], "leader": -1, "leader_epoch": None,
                "isr": [], "assigned": [], "replicas": {}}
    return {"topic": key[0], "partition": key[1], "leader": known.leader,
            "leader_epoch": known.leader_epoch, "isr": list(known.isr),
            "assigned": list(known.replicas), "replicas": {}}


def _replica(row: dict) -> dict:
    """One broker's own view of a replica: the role and epoch it acts on, the leader and ISR its
    metadata names, and its offsets."""
    compacted = "compact" in row["cleanup_policy"]
    epochs = [[e["epoch"], e["start_offset"]] for e in row.get("epochs", [])]
    replica = {
        "role": row["role"], "leader": row["leader"], "leader_epoch": row["leader_epoch"],
        "isr": list(row["isr"]), "log_start_offset": row["log_start_offset"],
        "high_watermark": row["high_watermark"], "log_end_offset": row["log_end_offset"],
        "last_stable_offset": row["last_stable_offset"],
        # [producer id, first offset], oldest first: at most one per producer writing to it
        "open_transactions": [[t["producer_id"], t["first_offset"]]
                              for t in row["open_transactions"]],
        "markers": [[m["offset"], m["type"], m["producer_id"]]
                    for m in row.get("markers", [])][-MARKERS_SHOWN_MAX:],
        "epochs": epochs[-EPOCHS_SHOWN_MAX:], "compacted": compacted,
        "first_dirty_offset": row["first_dirty_offset"], "last_known": False}
    if compacted:  # shown only for compacted topics; elsewhere it would change with every batch
        replica["size_bytes"] = row["size_bytes"]
        replica["cleaned"] = [[c["from_offset"], c["to_offset"], c["records"]]
                              for c in row.get("cleaned", [])][-CLEANED_SHOWN_MAX:]
    return replica


def _add_follower_lag(partitions: list[dict], replicas: dict[int, list[dict]],
                      truth: Authority) -> None:
    """On each follower replica, its lag as the authority's leader measures it: records behind,
    and since when (``behind_since_ms``, None while caught up). Left as it was when the leader
    does not answer."""
    leader_rows = {(r["topic"], r["partition"]): r
                   for broker_id, rows in replicas.items() for r in rows
                   if r["role"] == "leader" and (known := truth.partitions.get(
                       (r["topic"], r["partition"]))) is not None and known.leader == broker_id}
    for entry in partitions:
        row = leader_rows.get((entry["topic"], entry["partition"]))
        if row is None:
            continue
        for follower in row.get("followers", []):
            replica = entry["replicas"].get(follower["broker_id"])
            if replica is None or replica["last_known"]:
                continue  # a silent follower's lag is unknown (the leader's is its last fetch)
            behind = follower["lag_ms"] > 0 and follower.get("last_caught_up_ms") is not None
            replica["lag_records"] = follower["lag_records"]
            replica["behind_since_ms"] = follower["last_caught_up_ms"] if behind else None


def _add_truncations(partitions: list[dict], events: list[dict], now_ms: int) -> None:
    """On each replica, the ranges its broker truncated in the last ``TRUNCATED_SHOWN_MS``
    (newest ``TRUNCATIONS_SHOWN_MAX``). A broker that does not answer keeps the ones it had
    until they expire."""
    fresh: dict[tuple[str, int, int], list[dict]] = {}
    for event in events:
        broker_id = _broker_of(event.get("source", ""))
        if event.get("kind") != "Truncated" or broker_id is None or (
                now_ms - event["now_ms"] > TRUNCATED_SHOWN_MS):
            continue
        fresh.setdefault((event["topic"], event["partition"], broker_id), []).append(
            {"from_offset": event["from_offset"], "to_offset": event["to_offset"],
             "now_ms": event["now_ms"], "reason": event.get("reason", "")})
    for entry in partitions:
        for broker_id, replica in entry["replicas"].items():
            shown = fresh.get((entry["topic"], entry["partition"], broker_id))
            if shown is None and replica["last_known"]:
                shown = [t for t in replica.get("truncated", [])
                         if now_ms - t["now_ms"] <= TRUNCATED_SHOWN_MS]
            replica.pop("truncated", None)
            if shown:
                replica["truncated"] = shown[-TRUNCATIONS_SHOWN_MAX:]


def _broker_of(source: str) -> int | None:
    """The broker id in an event's ``source`` ("broker-2"), or None (the controller)."""
    head, _, broker_id = source.partition("-")
    return int(broker_id) if head == "broker" and broker_id.isdigit() else None


def _groups(groups: list[dict], replicas: dict[int, list[dict]], truth: Authority,
            share_claims: dict[int, list[dict]] | None = None) -> list[dict]:
    """Per group (one row, however many brokers claim it): its type, state, members, the
    coordinator and any stale claims, and per committed partition the offset and lag to the HW.
    A consumer group (KIP-848) adds its group and assignment epochs, its assignor and, per
    member, its epoch, state and partitions (``_consumer_member``); a share group (KIP-932) its
    epochs, members and share partitions (``_share_partition``) from ``share_claims``
    (``GET /v1/share_partitions`` per broker)."""
    high_watermarks = _leader_high_watermarks(replicas, truth)
    shares = merge_share_partitions(share_claims or {}, replicas, truth)
    rows = []
    for g in merge_groups(groups, truth, replicas):
        row = {"group": g["group"], "group_type": g.get("group_type", "classic"),
               "state": g["state"], "generation": g["generation"],
               "coordinator": g["coordinator"], "stale_coordinators": g["stale_coordinators"],
               "disagreement": g["disagreement"],
               "members": [m["client_id"] for m in g["members"]],
               "offsets": [
                   {"topic": o["topic"], "partition": o["partition"], "committed": o["offset"],
                    "lag": _lag(high_watermarks.get((o["topic"], o["partition"])), o["offset"])}
                   for o in g["offsets"]],
               "spark_query": _spark_query(g["offsets"])}
        if row["group_type"] == CONSUMER_GROUP_TYPE:
            row |= {"group_epoch": g["group_epoch"], "assignment_epoch": g["assignment_epoch"],
                    "assignor": g["assignor"],
                    "consumer_members": [_consumer_member(m) for m in g["members"]]}
        elif row["group_type"] == SHARE_GROUP_TYPE:
            leaders = _leader_rows(replicas, truth)
            row |= {"group_epoch": g["group_epoch"], "assignment_epoch": g["assignment_epoch"],
                    "assignor": g["assignor"],
                    "share_members": [_share_member(m) for m in g["members"]],
                    "share_partitions": [_share_partition(p, leaders) for p in shares
                                         if p["group"] == g["group"]]}
        rows.append(row)
    return rows


def _spark_query(offsets: list[dict]) -> str | None:
    """What the Spark query that committed the group's offsets said of itself (the pylog
    source's kafka.group.id: its commits' metadata carries a marker), else None."""
    for offset in offsets:
        query = spark_query_of(offset.get("metadata"))
        if query is not None:
            return query
    return None


def _share_member(member: dict) -> dict:
    """A share group's member: who it is, its epoch and the partitions it reads."""
    return {"member_id": member["member_id"], "client_id": member["client_id"],
            "client_host": member["client_host"], "member_epoch": member["member_epoch"],
            "assignment": _pairs(member["assignment"]),
            "subscribed_topic_names": member["subscribed_topic_names"]}


def _share_partition(share: dict, leaders: dict[tuple[str, int], dict]) -> dict:
    """A share partition as the view draws it: where it starts and ends on its partition's
    offset axis (the leader replica's log start, HW and LEO beside), its limits and counts, and
    its first in-flight records as ``[offset, state, delivery count, member id, lock deadline
    ms]``."""
    leader = leaders.get((share["topic"], share["partition"]), {})
    return {"topic": share["topic"], "partition": share["partition"], "leader": share["leader"],
            "start_offset": share["start_offset"], "end_offset": share["end_offset"],
            "log_start_offset": leader.get("log_start_offset"),
            "high_watermark": share["high_watermark"],
            "log_end_offset": leader.get("log_end_offset"), "lag": share["lag"],
            "delivery_count_limit": share["delivery_count_limit"],
            "record_lock_duration_ms": share["record_lock_duration_ms"],
            "in_flight": share["in_flight_records"], "counts": share["counts"],
            "records": [[r["offset"], r["state"], r["delivery_count"], r["member_id"],
                         r["lock_deadline_ms"]] for r in share["records"]],
            "records_beyond": share["records_beyond"]}


def _leader_rows(replicas: dict[int, list[dict]], truth: Authority) -> dict[tuple[str, int], dict]:
    """Each partition's row on the replica the authority names leader, if it answers."""
    return {(r["topic"], r["partition"]): r
            for broker_id, rows in replicas.items() for r in rows
            if (known := truth.partitions.get((r["topic"], r["partition"]))) is not None
            and known.leader == broker_id and r["role"] == "leader"}


def _share_group_events(previous: dict, groups: list[dict], now_ms: int) -> list[dict]:
    """What happened in each share group between ``previous`` and now: members that joined or
    left, acquired records that came back to the group (and why), records archived (and why).
    Nothing on a first snapshot: no change seen."""
    if "groups" not in previous:
        return []
    before = {g["group"]: g for g in previous["groups"]
              if g.get("group_type") == SHARE_GROUP_TYPE}
    steps: list[tuple[str, str, str]] = []
    for group in groups:
        if group["group_type"] == SHARE_GROUP_TYPE:
            steps += _share_steps(before.get(group["group"]), group, now_ms)
    return [{"now_ms": now_ms, "source": QUORUM_EVENT_SOURCE, "kind": kind,
             "category": EVENT_CATEGORIES[kind], "topic": topic, "text": text}
            for kind, topic, text in steps]


def _share_steps(old: dict | None, new: dict, now_ms: int) -> list[tuple[str, str, str]]:
    """(kind, topic, text) of each change of one share group (see ``_share_group_events``)."""
    name = f"share group {new['group']}"
    old = old or {"share_members": [], "share_partitions": []}
    was = {m["member_id"]: m for m in old["share_members"]}
    now = {m["member_id"]: m for m in new["share_members"]}
    steps: list[tuple[str, str, str]] = []
    for member_id, member in now.items():
        if member_id not in was:
            steps.append(("share_member_joined", "",
                          f"{name}: {_member_name(member)} joined (group epoch "
                          f"{new['group_epoch']}), reads {_partitions_text(member['assignment'])}"))
    for member_id, member in was.items():
        if member_id not in now:
            steps.append(("share_member_left", "",
                          f"{name}: {_member_name(member)} left (group epoch "
                          f"{new['group_epoch']}); what it held goes back to the group"))
    known = {**was, **now}
    olds = {(p["topic"], p["partition"]): p for p in old["share_partitions"]}
    for share in new["share_partitions"]:
        earlier = olds.get((share["topic"], share["partition"]))
        where = f"{name}, {share['topic']}-{share['partition']}"
        for kind, cause, offsets in _record_changes(earlier, share, set(now), now_ms):
            steps.append((kind, share["topic"], f"{where}: {_offsets_text(offsets)} "
                          f"{_record_cause(kind, cause, known, share)}"))
    return steps


# Why a record came back or was archived, as far as two snapshots tell: (why, member id, how).
# why: "left" (its member left the group), "expired" (its lock ran out), "released" (its member
# released it, or rejected it at the limit), "rejected", "limit" (delivered as often as the
# limit allows; how: left, expired or released, or None) or "unseen" (between two snapshots).
Cause = tuple[str, str | None, str | None]
RETURNED, ARCHIVED = "share_records_returned", "share_records_archived"


def _record_changes(old: dict | None, new: dict, members: set[str], now_ms: int
                    ) -> list[tuple[str, Cause, list[int]]]:
    """The records of one share partition that came back to the group or were archived, by
    (kind, cause), in offset order of their first record."""
    limit = new["delivery_count_limit"]
    before = {r[0]: r for r in (old or {}).get("records", [])}
    old_end = (old or {}).get("end_offset", new["start_offset"])
    now_records = {r[0]: r for r in new["records"]}
    found: dict[tuple[str, Cause], list[int]] = {}

    def back(record: list) -> Cause:
        """Why an acquired record ``[offset, state, count, member, deadline]`` went back."""
        member, deadline = record[3], record[4]
        if member not in members:
            return ("left", member, None)
        if deadline is not None and deadline <= now_ms:
            return ("expired", member, None)
        return ("released", member, None)

    for offset in sorted(set(before) | set(now_records)):
        was, now = before.get(offset), now_records.get(offset)
        if was is None and offset < old_end:
            continue  # in flight before, past the records the broker listed then
        change = _record_change(was, now, limit, back)
        if change is not None:
            found.setdefault(change, []).append(offset)
    return [(kind, cause, offsets) for (kind, cause), offsets in found.items()]


def _record_change(was: list | None, now: list | None, limit: int,
                   back: Callable[[list], Cause]) -> tuple[str, Cause] | None:
    """One record's change between two snapshots, or None when there is nothing the timeline
    marks (acquired, accepted, or not known). ``was`` is None for a record not handed out then,
    ``now`` None for one below the start offset now (settled, its state dropped)."""
    held = was if was is not None and was[1] == "acquired" else None  # acquired then
    old_count = was[2] if was is not None else 0
    if now is None:  # accepted or archived: certain only when it went back at the limit
        if held is not None and old_count >= limit and (cause := back(held))[0] != "released":
            return ARCHIVED, ("limit", cause[1], cause[0])
        return None
    state, count = now[1], now[2]
    if state == "archived":
        if was is not None and was[1] == "archived":
            return None
        if held is not None and count == old_count:
            if count < limit:
                return ARCHIVED, ("rejected", held[3], None)
            cause = back(held)
            return ARCHIVED, ("limit", cause[1], cause[0])
        return ARCHIVED, ("limit" if count >= limit else "rejected", None, None)
    if held is not None and (count > old_count or (state == "available"
                                                   and count == old_count)):
        return RETURNED, back(held)  # and, with a higher count, delivered again since
    handed = count - old_count  # deliveries since the last snapshot
    if state in ("available", "acquired") and handed > (state == "acquired"):
        return RETURNED, ("unseen", None, None)
    return None


def _record_cause(kind: str, cause: Cause, members: dict[str, dict], share: dict) -> str:
    """What became of the records, for one line of the timeline."""
    why, member_id, how = cause
    who = (_member_name(members[member_id]) if member_id in members
           else f"member {member_id[:MEMBER_ID_SHOWN]}" if member_id else "")
    if kind == ARCHIVED:
        if why == "rejected":
            return f"archived: rejected{f' by {who}' if who else ''}"
        last = {"left": f", then {who} left", "expired": f", then the lock of {who} ran out",
                "released": f", then {who} released or rejected it"}.get(how or "", "")
        return (f"archived: delivered {share['delivery_count_limit']} times, the delivery "
                f"limit{last}")
    return {"left": f"came back to the group: {who} left holding it",
            "expired": f"came back to the group: the lock of {who} ran out",
            "released": f"came back to the group: released by {who}",
            }.get(why, "came back to the group (released, or its lock ran out, between two "
                       "snapshots)")


def _offsets_text(offsets: list[int]) -> str:
    """[3, 4, 5, 9] as "records 3-5, 9"; [7] as "record 7"."""
    runs: list[list[int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset - 1:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset])
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
    return f"record{'s' if len(offsets) > 1 else ''} {text}"


def _consumer_member(member: dict) -> dict:
    """A consumer group's member as the view draws it: who it is, the epoch it has caught up
    with and its state (Kafka's MemberState), and its partitions as [topic, partition] pairs:
    what it owns (``assignment``), must give up (``pending_revocation``), is to own
    (``target_assignment``) and waits for another member to release (``unreleased``)."""
    return {"member_id": member["member_id"], "client_id": member["client_id"],
            "client_host": member["client_host"], "instance_id": member["group_instance_id"],
            "member_epoch": member["member_epoch"], "member_state": member["member_state"],
            "subscribed_topic_names": member["subscribed_topic_names"],
            "subscribed_topic_regex": member["subscribed_topic_regex"],
            **{name: _pairs(member[field]) for name, field in MEMBER_PARTITION_FIELDS}}


def _pairs(assignment: dict[str, list[int]]) -> list[list]:
    return [[topic, partition] for topic in sorted(assignment)
            for partition in sorted(assignment[topic])]


def _consumer_group_events(previous: dict, groups: list[dict], now_ms: int) -> list[dict]:
    """The steps of each consumer group's incremental rebalance that happened between
    ``previous`` and now, in Kafka's order: the group epoch bumped (a member joined, left or
    changed its subscription), the target assignment computed for it, a member told to revoke
    partitions and having revoked them, a member caught up to an epoch, a member given
    partitions another released, the group's state. Nothing on a first snapshot: no change
    seen. Stamped with the time the view saw them: steps between two snapshots share one."""
    if "groups" not in previous:
        return []
    before = {g["group"]: g for g in previous["groups"]
              if g.get("group_type") == CONSUMER_GROUP_TYPE}
    texts: list[tuple[str, str]] = []
    for group in groups:
        if group["group_type"] == CONSUMER_GROUP_TYPE:
            texts += _rebalance_steps(before.get(group["group"]), group)
    return [{"now_ms": now_ms, "source": QUORUM_EVENT_SOURCE, "kind": kind,
             "category": EVENT_CATEGORIES[kind], "topic": "", "text": text}
            for kind, text in texts]


def _rebalance_steps(old: dict | None, new: dict) -> list[tuple[str, str]]:
    name = f"group {new['group']}"
    old = old or {"group_epoch": 0, "assignment_epoch": 0, "state": "Empty",
                  "consumer_members": []}
    was = {m["member_id"]: m for m in old["consumer_members"]}
    now = {m["member_id"]: m for m in new["consumer_members"]}
    steps: list[tuple[str, str]] = []
    if new["group_epoch"] != old["group_epoch"]:
        why = [f"{_member_name(now[m])} joined" for m in now if m not in was]
        why += [f"{_member_name(was[m])} left" for m in was if m not in now]
        steps.append(("group_epoch_bumped",
                      f"{name}: group epoch {old['group_epoch']} -> {new['group_epoch']} ("
                      f"{', '.join(why) or 'a subscription or a subscribed topic changed'})"))
    if new["assignment_epoch"] != old["assignment_epoch"]:
        listed = new["consumer_members"][:TARGET_MEMBERS_NAMED]
        target = "; ".join(f"{_member_name(m)} {_partitions_text(m['target_assignment'])}"
                           for m in listed)
        if len(new["consumer_members"]) > len(listed):
            target += f"; and {len(new['consumer_members']) - len(listed)} more members"
        steps.append(("target_assignment_computed",
                      f"{name}: target assignment computed for epoch {new['assignment_epoch']} "
                      f"by the {new['assignor']} assignor: {target or 'no members'}"))
    empty = {"member_epoch": 0, "assignment": [], "pending_revocation": []}
    pairs = [(f"{name}: {_member_name(m)}", m, was.get(member_id, empty))
             for member_id, m in now.items()]
    # Each kind of step for every member before the next kind: steps seen in one snapshot are
    # listed in the order they must have happened (revoked before released to another).
    for who, member, earlier in pairs:
        if revoking := _minus(member["pending_revocation"], earlier["pending_revocation"]):
            steps.append(("member_revoking",
                          f"{who} must revoke {_partitions_text(revoking)} before it may take "
                          f"epoch {new['assignment_epoch']} (it is at {member['member_epoch']})"))
    for who, member, earlier in pairs:
        # what it owned (assigned, or still revoking) and owns no more: seen as a step of its
        # own, or between two snapshots together with the request to revoke
        if revoked := _minus(earlier["assignment"] + earlier["pending_revocation"],
                             member["assignment"] + member["pending_revocation"]):
            steps.append(("member_revoked", f"{who} revoked {_partitions_text(revoked)}"))
    for who, member, earlier in pairs:
        if member["member_epoch"] != earlier["member_epoch"]:
            steps.append(("member_caught_up", f"{who} {_epoch_step(member)}"))
    for who, member, earlier in pairs:
        gained = _minus(member["assignment"], earlier["assignment"])
        if gained and member["member_epoch"] == earlier["member_epoch"]:
            steps.append(("member_assigned",
                          f"{who} got {_partitions_text(gained)}, released by their owner"))
    if new["state"] != old["state"]:
        steps.append(("consumer_group_state",
                      f"{name} {old['state']} -> {new['state']} (group epoch "
                      f"{new['group_epoch']}, assignment epoch {new['assignment_epoch']})"))
    return steps


def _epoch_step(member: dict) -> str:
    epoch = member["member_epoch"]
    if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return ("left as a static member (epoch -2): it keeps its partitions until it rejoins "
                "or its session ends")
    text = f"caught up to epoch {epoch}, owns {_partitions_text(member['assignment'])}"
    if member["unreleased"]:
        text += f"; waits for {_partitions_text(member['unreleased'])} to be released"
    return text


def _member_name(member: dict) -> str:
    """A member as the events name it: its client id (what the application chose) and the
    start of its member id (client ids may repeat)."""
    return f"member {member['client_id'] or '?'} ({member['member_id'][:MEMBER_ID_SHOWN]})"


def _minus(pairs: list[list], others: list[list]) -> list[list]:
    taken = {tuple(p) for p in others}
    return [p for p in pairs if tuple(p) not in taken]


def _partitions_text(pairs: list[list]) -> str:
    """[["t", 0], ["t", 1], ["u", 3]] as Kafka's tools print an assignment: "t:0,1 u:3"."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in pairs:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{topic}:{','.join(str(p) for p in sorted(partitions))}"
                    for topic, partitions in sorted(by_topic.items())) or "nothing"


def _leader_high_watermarks(replicas: dict[int, list[dict]],
                            truth: Authority) -> dict[tuple[str, int], int]:
    """Each partition's HW on the replica the authority names leader, if it answers."""
    return {(r["topic"], r["partition"]): r["high_watermark"]
            for broker_id, rows in replicas.items() for r in rows
            if (known := truth.partitions.get((r["topic"], r["partition"]))) is not None
            and known.leader == broker_id and r["role"] == "leader"}


def _lag(high_watermark: int | None, committed: int) -> int | None:
    return None if high_watermark is None else max(high_watermark - committed, 0)


def _events(events: list[dict], internal: bool, derived: list[dict] | None = None) -> list[dict]:
    """The newest ``EVENTS_SHOWN`` notable events, oldest first, as rows of time, source, kind,
    category, topic and one line of text; ``derived``: rows of events the processes do not
    tell (the quorum's, ``_quorum_events``), merged in by time."""
    rows: list[dict] = []
    for event in reversed(events):
        row = _event_row(event)
        if row["category"] is None or (_internal(row["topic"]) and not internal
                                       and row["category"] != "group"):
            continue
        rows.append(row)
        if len(rows) == EVENTS_SHOWN:
            break
    return sorted(rows[::-1] + (derived or []), key=lambda row: row["now_ms"])[-EVENTS_SHOWN:]


def _event_row(event: dict) -> dict:
    """An event as time, source, kind, its timeline category and one line of text."""
    kind = event.get("kind", "")
    topic = event.get("topic") or ""
    if not topic and kind in TOPIC_EVENT_KINDS:
        topic = _topic_named_in(event.get("text", ""))
    return {"now_ms": event["now_ms"], "source": event["source"], "kind": kind,
            "category": EVENT_CATEGORIES.get(kind, "other"), "topic": topic,
            "text": _event_text(event)}


def _topic_named_in(text: str) -> str:
    """The topic a topic-level controller event's text names ("topic t created"), or ""."""
    words = text.split(" ", 2)
    return words[1] if words[0] == "topic" and len(words) > 1 else ""


def _event_text(event: dict) -> str:
    """The controller's own text, or one sentence for a broker's replication or group event."""
    if "text" in event:
        return event["text"]
    kind = event.get("kind", "")
    where = f"{event['topic']}-{event['partition']}" if "topic" in event else ""
    if kind == "Truncated":
        return (f"{where} truncated to offset {event['to_offset']}: removed "
                f"[{event['to_offset']}, {event['from_offset']}) ({event['reason']})")
    if kind == "RequestIsrChange":
        return (f"{where} leader asks the controller for ISR {list(event['current_isr'])} -> "
                f"{list(event['new_isr'])} (leader epoch {event['leader_epoch']})")
    if kind == "GroupStateChanged":
        return (f"group {event['group_id']} {event['old_state']} -> {event['new_state']} "
                f"(generation {event['generation_id']}, {event['reason']})")
    if kind == "MemberRemoved":
        return f"group {event['group_id']} lost member {event['member_id']} ({event['reason']})"
    details = ", ".join(f"{k}={v}" for k, v in event.items()
                        if k not in ("kind", "topic", "partition", "now_ms", "source"))
    return " ".join(part for part in (kind, where, details) if part)
