"""Cluster introspection as pandas DataFrames, for notebooks and widgets.

Theory of operation: each broker reports its own replicas (``/v1/partitions``): the role it acts
in, the leader epoch it acts at, and the leader and ISR its metadata names. Under faults these
views disagree. A paused or isolated broker goes on acting as leader at an epoch the controller
has superseded; a leader may still list an ISR the controller has shrunk. So one broker's answer
is never the partition's state. The authority is the controller's image (KRaft's metadata log):
every replica row carries the authority's leader, epoch and ISR beside its own, and a
``disagreement`` text naming what differs, empty when they agree. Without a controller the
authority is the next best thing, and says so in its ``source``:

- ``controller``: the active controller's image,
- ``newest claim``: the controller does not answer; per partition, the view of the replica that
  acts as leader at the highest epoch any broker reports.

The widget snapshot and the consumer-group list use the same authority, so the view shows one
leader per partition and one coordinator per group, with stale claims marked, not repeated.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import pandas as pd

from ..cluster import ClusterError, LocalCluster

PARTITION_COLUMNS = [
    "broker", "topic", "partition", "role", "leader", "leader_epoch", "isr",
    "controller_leader", "controller_leader_epoch", "controller_isr", "disagreement",
    "log_start_offset", "high_watermark", "last_stable_offset", "open_transactions",
    "log_end_offset", "size_bytes", "segments", "first_dirty_offset", "max_follower_lag_records",
]
EVENT_COLUMNS = ["time", "source", "kind", "topic", "partition"]
QUORUM_COLUMNS = ["controller", "state", "role", "active", "epoch", "leader", "committed_offset",
                  "lag"]
LAST_KNOWN_COLUMN = "last_known"  # added when a row is a silent controller's last answer
OFFSETS_TOPIC = "__consumer_offsets"  # a group's coordinator is the leader of its partition here
NO_LEADER = -1  # Kafka's leader id while no replica can lead

Key = tuple[str, int]


@dataclass(frozen=True)
class PartitionTruth:
    """One partition as the authority has it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class Authority:
    """Whose leaders and ISRs count (``source``: controller or newest claim, see the
    module docstring) and every partition as that source has it."""

    source: str
    partitions: dict[Key, PartitionTruth]


# == DataFrames =================================================================================


def partitions_frame(cluster: LocalCluster) -> pd.DataFrame:
    """One row per (broker, partition replica): offsets, the epoch and ISR this broker acts on,
    the controller's leader, epoch and ISR beside them, and what differs in ``disagreement``.
    ``last_stable_offset`` is where read_committed consumers stop (below the first record of the
    oldest open transaction, else the HW); ``open_transactions`` counts the open transactions.

    With the controller unreachable the controller columns are empty and ``disagreement``
    compares with the newest leader epoch any broker reports.
    """
    replicas = cluster.describe()
    truth = authority_of(cluster, replicas)
    isolated = {b for b, state in cluster.broker_states().items() if state == "isolated"}
    rows = []
    for broker_id, partitions in replicas.items():
        for p in partitions:
            known = truth.partitions.get((p["topic"], p["partition"]))
            shown = known if truth.source != "newest claim" else None
            rows.append({
                **p, "broker": broker_id, "segments": len(p["segments"]),
                "open_transactions": len(p["open_transactions"]),
                "max_follower_lag_records": _max_lag(p["followers"]),
                "controller_leader": None if shown is None else shown.leader,
                "controller_leader_epoch": None if shown is None else shown.leader_epoch,
                "controller_isr": None if shown is None else list(shown.isr),
                "disagreement": disagreement(broker_id, p, known, truth.source,
                                             broker_id in isolated)})
    frame = pd.DataFrame(rows, columns=PARTITION_COLUMNS)
    return frame.astype({"controller_leader": "Int64", "controller_leader_epoch": "Int64"})


def quorum_frame(cluster: LocalCluster,
                 views: dict[int, tuple[str, dict | None]] | None = None) -> pd.DataFrame:
    """One row per controller: its state (up, paused, isolated, down), and as it answers, its
    Raft role, the epoch and leader it knows and its committed offset (the metadata log's high
    watermark); ``active`` marks the active controller, and ``lag`` is how many records each
    voter is behind the active controller's log end, as the active controller knows it.

    A controller that does not answer (down, paused) keeps what it said when a ``quorum_frame``
    of this cluster last heard it: its role, epoch, leader and committed offset then, never
    ``active``; a ``last_known`` column ("as of 12:01:03") marks such rows, and is there only
    when one is. One never heard has only its state and its lag. ``views`` is
    ``cluster.controller_views()`` when the caller has it already; an empty frame for a cluster
    without controllers.
    """
    views = cluster.controller_views() if views is None else views
    heard = _LAST_ANSWERS.setdefault(cluster, {})
    now = time.time()
    active = active_controller_of(views)
    leading = None if active is None else views[active][1]
    lags = {} if leading is None else leading["voter_lag"]
    rows = []
    for controller_id, (state, quorum) in views.items():
        if quorum is not None:
            heard[controller_id] = (now, quorum)
            when, known = None, quorum
        else:
            when, known = heard.get(controller_id, (None, {}))
        rows.append({
            "controller": controller_id, "state": state, "role": known.get("role"),
            "active": controller_id == active, "epoch": known.get("epoch"),
            "leader": known.get("leader_id"), "committed_offset": known.get("high_watermark"),
            "lag": lags.get(str(controller_id)), LAST_KNOWN_COLUMN: _as_of(when)})
    frame = pd.DataFrame(rows, columns=[*QUORUM_COLUMNS, LAST_KNOWN_COLUMN])
    if not frame[LAST_KNOWN_COLUMN].any():  # every row is an answer of now
        frame = frame.drop(columns=LAST_KNOWN_COLUMN)
    return frame.astype({"active": bool, "epoch": "Int64", "leader": "Int64",
                         "committed_offset": "Int64", "lag": "Int64"})


# What each controller last said, per cluster, for quorum_frame's rows of silent controllers.
_LAST_ANSWERS: weakref.WeakKeyDictionary[LocalCluster, dict[int, tuple[float, dict]]] = (
    weakref.WeakKeyDictionary())


def _as_of(when: float | None) -> str:
    """``last_known``'s text: empty for an answer of now, else when it was heard."""
    return "" if when is None else f"as of {time.strftime('%H:%M:%S', time.localtime(when))}"


def active_controller_of(views: dict[int, tuple[str, dict | None]]) -> int | None:
    """The active controller in ``controller_views()``: of the voters that say they are active,
    the one at the highest epoch (a paused or isolated old leader may still say so at an older
    one), as ``LocalCluster.active_controller`` chooses."""
    claims = [(quorum["epoch"], controller_id) for controller_id, (_state, quorum) in views.items()
              if quorum is not None and quorum["active"]]
    return max(claims)[1] if claims else None


def _max_lag(followers: list[dict]) -> int | None:
    """Largest known follower lag; None when no follower's position is known yet."""
    known = [f["lag_records"] for f in followers if f["lag_records"] is not None]
    return max(known) if known else (0 if not followers else None)


def events_frame(cluster: LocalCluster) -> pd.DataFrame:
    """Cluster events oldest first; columns beyond EVENT_COLUMNS depend on the kind."""
    rows = [{**e, "time": pd.Timestamp(e["now_ms"], unit="ms")} for e in cluster.events()]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    rest = [c for c in frame.columns if c not in EVENT_COLUMNS]
    return frame[[c for c in EVENT_COLUMNS if c in frame.columns] + rest]


# == the authority ==============================================================================


def authority_of(cluster: LocalCluster, replicas: dict[int, list[dict]]) -> Authority:
    """The controller's image of every partition, or a fallback named in ``source``.

    ``replicas`` is ``cluster.describe()``, read by the caller so that every view it builds
    compares the same answers.
    """
    from pylog_nb.broker.controller.rpc import ControllerRpcError

    try:
        described = cluster.controller_describe()
    except (OSError, ValueError, ClusterError, ControllerRpcError):  # killed, restarting
        return authority_from_brokers(replicas, "newest claim")
    return authority_from_controller(described)


def authority_from_controller(described: dict) -> Authority:
    """The partitions of ``controller_describe()``'s image."""
    return Authority("controller", {
        (topic["name"], index): PartitionTruth(
            p["leader"], p["leader_epoch"], tuple(p["isr"]), tuple(p["replicas"]))
        for topic in described["topics"] for index, p in enumerate(topic["partitions"])})


def authority_from_brokers(replicas: dict[int, list[dict]], source: str) -> Authority:
    """Per partition, the view of the replica acting as leader at the highest epoch (ties: the
    lowest broker id); when none acts as leader, the view at the highest epoch."""
    assert source == "newest claim", source
    best: dict[Key, tuple[tuple, PartitionTruth]] = {}
    for broker_id, rows in replicas.items():
        for row in rows:
            key = (row["topic"], row["partition"])
            acts = row["role"] == "leader"  # a claimant leads in its own view, whatever the image
            rank = (acts, row["leader_epoch"], -broker_id)
            if key not in best or rank > best[key][0]:
                best[key] = (rank, PartitionTruth(
                    broker_id if acts else row["leader"], row["leader_epoch"],
                    tuple(row["isr"]), tuple(row["replicas"])))
    return Authority(source, {key: known for key, (_rank, known) in best.items()})


# == disagreements ==============================================================================


def disagreement(broker_id: int, row: dict, truth: PartitionTruth | None, source: str,
                 isolated: bool = False, silent: bool = False) -> str:
    """What broker ``broker_id``'s view ``row`` of a partition gets wrong compared with
    ``truth`` (the authority's, from ``source``); empty when they agree.

    The ISR is compared only on the row of the replica acting as leader at the authority's
    epoch: a follower's ISR is hearsay, and a stale leader's is already named stale.
    ``silent``: the broker does not answer (paused, down) and ``row`` is what it last
    reported; a process that answers nothing acts on nothing, so the text says what it last
    claimed, in the past ("last claimed leader at epoch 0"), never what it "acts as".
    """
    if truth is None:
        return f"unknown to the {source} (a deleted topic?)"
    if silent:
        return _silent_disagreement(broker_id, row, truth, source)
    role, epoch = row["role"], row["leader_epoch"]
    leads = _leads(truth)
    if role == "leader" and (truth.leader != broker_id or epoch != truth.leader_epoch):
        kind = "stale leader" if epoch <= truth.leader_epoch else "leader ahead"
        text = (f"{kind}: acts as leader at epoch {epoch}, "
                f"{source}: {leads} at epoch {truth.leader_epoch}")
        return text + ("; isolated broker still claims leadership" if isolated else "")
    if role == "leader":
        if set(row["isr"]) != set(truth.isr):
            return (f"ISR: broker sees {_ids(row['isr'])}, "
                    f"{source} committed {_ids(truth.isr)}")
        return ""
    acting = "follows" if role == "follower" else f"is {role}"
    if broker_id not in truth.replicas:
        return f"not a replica: {acting}, {source} assigns {_ids(truth.replicas)}"
    if epoch != truth.leader_epoch:
        return f"stale epoch: {acting} at epoch {epoch}, {source} epoch {truth.leader_epoch}"
    if truth.leader == broker_id:
        return f"not leading yet: {acting} at epoch {epoch}, {source}: it leads"
    return ""


def _silent_disagreement(broker_id: int, row: dict, truth: PartitionTruth, source: str) -> str:
    """``disagreement`` for a broker that does not answer: its last claim, where the authority
    has moved on from it (a new leader, a new epoch, another assignment)."""
    role, epoch = row["role"], row["leader_epoch"]
    claim = f"last claimed {role} at epoch {epoch}"
    if broker_id not in truth.replicas:
        return f"{claim}; {source} assigns {_ids(truth.replicas)}"
    if role == "leader" and truth.leader != broker_id:
        return f"{claim}; {source}: {_leads(truth)} at epoch {truth.leader_epoch}"
    if epoch != truth.leader_epoch:
        return f"{claim}; {source} epoch {truth.leader_epoch}"
    return ""


def _leads(truth: PartitionTruth) -> str:
    return "no leader" if truth.leader == NO_LEADER else f"broker {truth.leader} leads"


def _ids(broker_ids) -> str:
    return "[" + ",".join(str(b) for b in broker_ids) + "]"


# == consumer groups ============================================================================


def merge_groups(groups: list[dict], truth: Authority,
                 replicas: dict[int, list[dict]]) -> list[dict]:
    """One row per group out of every broker's claim to coordinate it (``cluster.groups()``).

    The row is the claim of the broker that leads the group's ``__consumer_offsets`` partition
    by ``truth``; any other claim (an isolated or paused broker that has not heard it lost the
    partition) is named in the row's ``disagreement`` and listed in ``stale_coordinators``.
    Without a claim from that leader (it is still loading the group, or does not answer), the
    claim at the highest epoch of the partition stands in, marked stale too.
    """
    claims: dict[str, list[dict]] = {}
    for group in groups:
        claims.setdefault(group["group"], []).append(group)
    return [_one_group(claims[g], truth, replicas) for g in sorted(claims)]


def _one_group(claims: list[dict], truth: Authority, replicas: dict[int, list[dict]]) -> dict:
    partition = claims[0]["coordinator_partition"]
    known = truth.partitions.get((OFFSETS_TOPIC, partition))
    epochs = {b: row["leader_epoch"] for b, rows in replicas.items() for row in rows
              if (row["topic"], row["partition"]) == (OFFSETS_TOPIC, partition)}

    def rank(claim: dict) -> tuple:
        coordinator = claim["coordinator"]
        return (known is not None and coordinator == known.leader,
                epochs.get(coordinator, -1), -coordinator)

    chosen = max(claims, key=rank)
    stale = sorted(c["coordinator"] for c in claims if c is not chosen)
    notes = [f"broker {b} still claims it (stale)" for b in stale]
    if known is not None and chosen["coordinator"] != known.leader:
        notes.insert(0, f"broker {chosen['coordinator']}'s claim is stale")
    if notes and known is not None:
        leads = "no leader" if known.leader == NO_LEADER else f"broker {known.leader} leads"
        notes.append(f"{truth.source}: {leads} {OFFSETS_TOPIC}-{partition} "
                     f"at epoch {known.leader_epoch}")
    return {**chosen, "stale_coordinators": stale, "disagreement": "; ".join(notes)}


def credentials_frame(cluster: LocalCluster) -> pd.DataFrame:
    """The owner's client settings, one row each, after a kcat line that uses them."""
    print(f"kcat: {cluster.kcat_command('-L')}")
    if cluster.secrets is None:
        print("this cluster has no security (security='none'): any local process may connect")
    settings = cluster.client_config()
    return pd.DataFrame({"setting": list(settings), "value": list(settings.values())})
