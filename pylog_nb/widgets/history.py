"""The snapshots a live view has shown, kept in the kernel so a user can step back to the moment
of an election, and the timeline marks that point at them.

Theory of operation: ``record`` is called with every snapshot the view takes. A snapshot equal
to the newest one is not recorded (an idle cluster adds nothing, and the view sends nothing);
a different one gets the next sequence number. The history is bounded twice: by count and by
the JSON size of what it holds, so a 100-partition cluster keeps fewer snapshots than a
3-partition one, never more memory. The oldest go first.

Marks are what the timeline draws: each notable event the first time a snapshot shows it, and
each broker or controller state change the view saw (up -> down after a kill, before the
controller says anything; a new active controller is an event of the snapshot itself). A
mark names the snapshot (``seq``) that first showed it, so a click on a mark replays that
moment. Marks of snapshots no longer kept are dropped with them.

The charts draw the same history: ``series_point`` reduces a recorded snapshot to per partition
HW and LEO (the leader's, as consumers see them), per group the total lag (a share group's
over its share partitions), per broker its
traffic rates (records in, bytes out to consumers and to followers); ``series`` is the
newest ``SERIES_POINTS_MAX`` of them, sent once when a browser view opens (after that, each
change carries its own point).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass

HISTORY_SNAPSHOTS_MAX = 300  # 5 minutes of changes at 1 Hz: back past an election and its causes
HISTORY_BYTES_MAX = 16 * 1024 * 1024  # JSON bytes kept; a 100-partition snapshot is ~100 KB
MARKS_MAX = 200  # the timeline is a strip of a few hundred pixels: more would be one smear
SERIES_POINTS_MAX = 120  # a sparkline is ~120 px wide; at 100 partitions ~150 KB sent once


@dataclass(frozen=True, slots=True)
class Recorded:
    """One snapshot as the view showed it: its number, when it was taken, its JSON size."""

    seq: int
    taken_ms: int
    snapshot: dict
    size_bytes: int


class SnapshotHistory:
    """Bounded, oldest-first record of the distinct snapshots of one view, and their marks."""

    def __init__(self, snapshots_max: int = HISTORY_SNAPSHOTS_MAX,
                 bytes_max: int = HISTORY_BYTES_MAX, marks_max: int = MARKS_MAX) -> None:
        assert snapshots_max >= 1 and bytes_max >= 1 and marks_max >= 0
        self.snapshots_max = snapshots_max
        self.bytes_max = bytes_max
        self.marks_max = marks_max
        self._recorded: deque[Recorded] = deque()
        self._marks: deque[dict] = deque()
        self._next_seq = 1
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._recorded)

    @property
    def latest(self) -> Recorded | None:
        return self._recorded[-1] if self._recorded else None

    def record(self, snapshot: dict, taken_ms: int) -> Recorded | None:
        """Keep ``snapshot`` if it differs from the newest one; the new entry, or None."""
        latest = self.latest
        if latest is not None and latest.snapshot == snapshot:
            return None
        entry = Recorded(self._next_seq, taken_ms, snapshot,
                         len(json.dumps(snapshot, separators=(",", ":"))))
        self._next_seq += 1
        self._recorded.append(entry)
        self.size_bytes += entry.size_bytes
        self._marks.extend(_marks_between(latest, entry))
        self._evict()
        return entry

    def at(self, seq: int) -> Recorded | None:
        """The snapshot numbered ``seq``, if it is still kept."""
        if not self._recorded:
            return None
        index = seq - self._recorded[0].seq  # sequence numbers are consecutive
        return self._recorded[index] if 0 <= index < len(self._recorded) else None

    def timeline(self) -> dict:
        """What the timeline strip draws: the range of kept snapshots and the marks in it."""
        if not self._recorded:
            return {"first_seq": 0, "last_seq": 0, "first_ms": 0, "last_ms": 0, "marks": []}
        first, last = self._recorded[0], self._recorded[-1]
        return {"first_seq": first.seq, "last_seq": last.seq, "first_ms": first.taken_ms,
                "last_ms": last.taken_ms, "marks": list(self._marks)}

    def series(self, points_max: int = SERIES_POINTS_MAX) -> list[dict]:
        """The charts' points for the newest ``points_max`` kept snapshots, oldest first."""
        newest = list(self._recorded)[-points_max:] if points_max else []
        return [series_point(entry) for entry in newest]

    def _evict(self) -> None:
        """Drop the oldest snapshots (never the newest) until both limits hold, then the marks
        that point at dropped snapshots or exceed ``marks_max``."""
        while len(self._recorded) > 1 and (len(self._recorded) > self.snapshots_max
                                           or self.size_bytes > self.bytes_max):
            self.size_bytes -= self._recorded.popleft().size_bytes
        first_seq = self._recorded[0].seq
        while self._marks and (self._marks[0]["seq"] < first_seq
                               or len(self._marks) > self.marks_max):
            self._marks.popleft()
        assert len(self._recorded) <= self.snapshots_max and len(self._marks) <= self.marks_max


def _marks_between(before: Recorded | None, after: Recorded) -> list[dict]:
    """Marks for what ``after`` shows that ``before`` did not: new events, broker and controller
    state changes."""
    seen = set() if before is None else {_event_key(e) for e in before.snapshot.get("events", [])}
    marks = [{"seq": after.seq, "now_ms": e["now_ms"], "category": e["category"],
              "source": e["source"], "text": e["text"]}
             for e in after.snapshot.get("events", []) if _event_key(e) not in seen]
    if before is not None:
        was = {b["broker_id"]: _shown_state(b) for b in before.snapshot.get("brokers", [])}
        for broker in after.snapshot.get("brokers", []):
            old, new = was.get(broker["broker_id"]), _shown_state(broker)
            if old is not None and old != new:
                marks.append({"seq": after.seq, "now_ms": after.taken_ms, "category": "broker",
                              "source": "view",
                              "text": f"broker {broker['broker_id']} {old} -> {new}"})
        was = {c["controller_id"]: c["state"] for c in before.snapshot.get("controllers", [])}
        for controller in after.snapshot.get("controllers", []):
            old = was.get(controller["controller_id"])
            if old is not None and old != controller["state"]:
                marks.append({"seq": after.seq, "now_ms": after.taken_ms,
                              "category": "controller", "source": "view",
                              "text": f"controller {controller['controller_id']} {old} -> "
                                      f"{controller['state']}"})
    return sorted(marks, key=lambda m: m["now_ms"])


def _event_key(event: dict) -> tuple:
    return (event["now_ms"], event["source"], event["text"])


def _shown_state(broker: dict) -> str:
    """The state a broker node shows: a running broker the controller fenced is "fenced"."""
    if broker["state"] == "up" and broker.get("fenced"):
        return "fenced"
    return broker["state"]


def series_point(entry: Recorded) -> dict:
    """What the charts draw of one snapshot: its time, per partition ("topic-partition") the
    leader's [HW, LEO] (the highest any replica reports when no leader answers), per group the
    total lag (None while a partition's lag is unknown: its leader does not answer), per
    broker its traffic rates where known (records in, bytes in and out per second)."""
    partitions = {}
    for p in entry.snapshot.get("partitions", []):
        replicas = p.get("replicas", {})
        leader = replicas.get(p.get("leader"))
        shown = [leader] if leader is not None else list(replicas.values())
        if shown:
            partitions[f"{p['topic']}-{p['partition']}"] = [
                max(r["high_watermark"] for r in shown), max(r["log_end_offset"] for r in shown)]
    groups = {g["group"]: _total_lag(g) for g in entry.snapshot.get("groups", [])}
    brokers = {str(b["broker_id"]): b["rates"] for b in entry.snapshot.get("brokers", [])
               if b.get("rates") is not None}
    return {"seq": entry.seq, "taken_ms": entry.taken_ms, "partitions": partitions,
            "groups": groups, "brokers": brokers}


def _total_lag(group: dict) -> int | None:
    """The lag of its committed offsets; a share group's, of its share partitions (KIP-1226:
    records past the start offset, up to the HW, not yet acknowledged or archived)."""
    if "share_partitions" in group:
        lags = [p["lag"] for p in group["share_partitions"]]
    else:
        lags = [o["lag"] for o in group.get("offsets", [])]
    return None if None in lags else sum(lags)
