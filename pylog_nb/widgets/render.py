"""HTML for a cluster snapshot. Every value passes through ``html.escape``: group ids, client
ids and event texts come from clients and are untrusted."""

from __future__ import annotations

import datetime
from html import escape

BAR_WIDTH_PX = 120
STATE_COLOURS = {"up": "#2e7d32", "paused": "#f9a825", "isolated": "#ef6c00", "down": "#c62828"}
WARNING_COLOUR = "#b71c1c"  # a replica's own view contradicts the controller's
STALE_COLOUR = "#999"
LSO_COLOUR = "#ff9800"  # the LSO mark (as the live view): where read_committed consumers stop
MARKER_COLOURS = {"COMMIT": "#43a047", "ABORT": "#e53935"}  # as the live view's marker marks
MARKERS_LISTED_MAX = 4  # the newest markers a replica's text names (the bar shows them all)
MARKER_HELP = "a transaction marker: an offset no consumer receives"
NOTE_WIDTH_PX = 2 * BAR_WIDTH_PX  # a warning wraps at this width instead of widening its column
# Inline styles (a pane's HTML must not restyle the rest of the page): padded cells, top-aligned,
# and numbers that never break across lines.
TABLE = '<table style="border-collapse:collapse">'
TH = '<th style="padding:2px 10px 2px 0;text-align:left;vertical-align:bottom">'
TD = '<td style="padding:3px 10px 3px 0;vertical-align:top">'
NOWRAP = '<span style="white-space:nowrap">'
CLOSED_STYLE = "border-left:3px solid #9e9e9e;padding-left:8px"  # a picture, not the live view
CONSUMER_GROUP = "consumer"  # the group_type of a consumer-protocol (KIP-848) group
SHARE_GROUP = "share"  # the group_type of a share group (KIP-932)
RECORD_STATES = ("available", "acquired", "acknowledged", "archived")


def render_closed_view(snapshot: dict, closed_ms: int) -> str:
    """What a closed live view leaves in its cell (and a saved notebook keeps): the brokers,
    every partition's replicas and the latest events as it last showed them, under a line
    saying when it closed."""
    when = _clock(closed_ms)[:8]
    return (f'<div class="pylog-closed-view" style="{CLOSED_STYLE}">'
            f"<div><b>Cluster view</b> (closed at {_e(when)}): the last state it showed; "
            "run <code>%log_watch</code> for a live one</div>"
            f"{render_brokers(snapshot)}{render_partitions(snapshot)}"
            f"<div><b>Latest events</b></div>{render_events(snapshot)}</div>")


def render_brokers(snapshot: dict) -> str:
    badges = "".join(
        f'<span style="margin-right:12px">broker {_e(b["broker_id"])} '
        f'<b style="color:{STATE_COLOURS.get(b["state"], "#555")}">{_e(_state(b))}</b></span>'
        for b in snapshot["brokers"])
    return f"<div>{badges}</div>"


def render_partitions(snapshot: dict) -> str:
    """One row per partition: the controller's leader, epoch and ISR, then each replica's own
    role and LEO/HW as a bar, with a ⚠ and the text where its view disagrees."""
    states = {b["broker_id"]: _state(b) for b in snapshot["brokers"]}
    head = "".join(f"{TH}broker {_e(b)}</th>" for b in states)
    rows = "".join(_partition_row(p, states) for p in snapshot["partitions"])
    if not rows:
        rows = f'<tr><td colspan="{4 + len(states)}">no topics yet</td></tr>'
    return (f"{_authority_note(snapshot.get('authority', 'controller'))}"
            f"{TABLE}<tr>{TH}partition</th>{TH}leader</th>{TH}epoch</th>{TH}ISR</th>{head}</tr>"
            f"{rows}</table>")


def _state(broker: dict) -> str:
    """``up``, ``isolated``, or for a broker that does not answer, since when: ``down since
    12:01:03`` (the kernel's clock)."""
    since_ms = broker.get("silent_since_ms")
    if since_ms is None:
        return str(broker["state"])
    since = datetime.datetime.fromtimestamp(since_ms / 1000).strftime("%H:%M:%S")
    return f"{broker['state']} since {since}"


def _authority_note(source: str) -> str:
    if source != "newest claim":  # the controller's image, or a one-broker cluster's own view
        return ""
    return (f'<div style="color:{WARNING_COLOUR}">⚠ the controller does not answer: leader, '
            "epoch and ISR are the newest any broker claims</div>")


def _partition_row(partition: dict, states: dict[int, str]) -> str:
    replicas = partition["replicas"]
    top = max([r["log_end_offset"] for r in replicas.values()] + [1])
    cells = "".join(f"{TD}{_replica_slot(partition, b, state, top)}</td>"
                    for b, state in states.items())
    leader = partition["leader"] if partition["leader"] >= 0 else "none"
    epoch = "?" if partition["leader_epoch"] is None else partition["leader_epoch"]
    return (f"<tr>{TD}{NOWRAP}{_e(partition['topic'])}-{_e(partition['partition'])}</span></td>"
            f"{TD}{_e(leader)}</td>{TD}{_e(epoch)}</td>"
            f"{TD}{NOWRAP}{_e(partition['isr'])}</span></td>{cells}</tr>")


def _replica_slot(partition: dict, broker_id: int, state: str, top: int) -> str:
    """The replica's cell; a grey note for an assigned replica never heard from."""
    replica = partition["replicas"].get(broker_id)
    if replica is not None:
        return _replica_cell(replica, top, _role(partition, broker_id, replica), state,
                             _out_of_isr(partition, broker_id))
    if broker_id in partition.get("assigned", []):
        return f'<small style="color:{STALE_COLOUR}">no answer ({_e(state)})</small>'
    return ""


def _out_of_isr(partition: dict, broker_id: int) -> bool:
    """An assigned replica the authority's ISR leaves out (only when that ISR is known)."""
    return bool(partition["isr"]) and broker_id not in partition["isr"]


def _role(partition: dict, broker_id: int, replica: dict) -> str:
    """The role as the view states it: one ★ leader per partition, the controller's; any other
    replica acting as leader only claims to, at the epoch it is stuck on."""
    role, epoch = replica["role"], replica["leader_epoch"]
    current = partition["leader_epoch"]
    if replica.get("last_known"):  # its broker does not answer: it acts on nothing now
        return f"last claimed {role} at epoch {epoch}"
    if role == "leader" and broker_id == partition["leader"] and epoch == current:
        return "★ leader"
    if role == "leader":
        ahead = current is not None and epoch > current
        return f"claims leader ({'ahead at' if ahead else 'stale'} epoch {epoch})"
    if current is not None and epoch != current:
        return f"{role} (epoch {epoch})"
    return role


def _replica_cell(replica: dict, top: int, role: str, state: str = "up",
                  out_of_isr: bool = False) -> str:
    """A bar: filled up to the HW, lighter up to the LEO, an orange mark at the LSO when open
    transactions hold it below the HW; the numbers beside it; any disagreement with the
    controller; greyed when it is the broker's last known state."""
    hw_px = BAR_WIDTH_PX * replica["high_watermark"] // top
    leo_px = BAR_WIDTH_PX * replica["log_end_offset"] // top
    bar = (f'<div style="position:relative;width:{BAR_WIDTH_PX}px;height:8px;background:#eee">'
           f'<div style="position:absolute;width:{leo_px}px;height:8px;background:#90caf9"></div>'
           f'<div style="position:absolute;width:{hw_px}px;height:8px;background:#1565c0"></div>'
           f"{_marker_marks(replica, top)}{_lso_mark(replica, top)}</div>")
    outside = f'<span style="color:{STALE_COLOUR}"> · out of ISR</span>' if out_of_isr else ""
    text = (f"{bar}<small>{NOWRAP}{_e(role)} · HW {_e(replica['high_watermark'])}"
            f"{_transactions(replica)} · LEO {_e(replica['log_end_offset'])}{outside}</span>"
            f"{_markers(replica)}{_compaction(replica)}"
            f"{_disagreement(replica.get('disagreement', ''))}</small>")
    if not replica.get("last_known"):
        return text
    return (f'<div style="opacity:0.45" title="last known state: the broker does not answer">'
            f"{text}<br><small>last known · broker {_e(state)}</small></div>")


def _lso_below_hw(replica: dict) -> bool:
    return bool(replica["last_stable_offset"] < replica["high_watermark"])


def _lso_mark(replica: dict, top: int) -> str:
    if not _lso_below_hw(replica):
        return ""
    lso_px = BAR_WIDTH_PX * replica["last_stable_offset"] // top
    return (f'<div class="pylog-lso-mark" title="LSO {_e(replica["last_stable_offset"])}: '
            f'read_committed consumers stop here, at the first record of an open transaction" '
            f'style="position:absolute;left:{lso_px}px;top:-2px;width:2px;height:12px;'
            f'background:{LSO_COLOUR}"></div>')


def _marker_marks(replica: dict, top: int) -> str:
    """A green (commit) or red (abort) tick at each transaction marker's offset."""
    width_px = max(BAR_WIDTH_PX // top, 2)
    return "".join(
        f'<div class="pylog-marker-mark" data-offset="{_e(offset)}" data-type="{_e(kind)}" '
        f'title="{_e(kind)} marker at offset {_e(offset)}, producer id {_e(producer_id)}: '
        f'{MARKER_HELP}" style="position:absolute;left:{BAR_WIDTH_PX * offset // top}px;'
        f"top:-2px;width:{width_px}px;height:12px;"
        f'background:{MARKER_COLOURS.get(kind, STALE_COLOUR)}"></div>'
        for offset, kind, producer_id in replica.get("markers", []))


def _markers(replica: dict) -> str:
    """``markers 2 commit, 4 abort``: the newest few, where the ticks on the bar are."""
    markers = replica.get("markers", [])
    if not markers:
        return ""
    shown = ", ".join(f'<span style="color:{MARKER_COLOURS.get(kind, STALE_COLOUR)}">'
                      f"{_e(offset)} {_e(str(kind).lower())}</span>"
                      for offset, kind, _pid in markers[-MARKERS_LISTED_MAX:])
    more = len(markers) - MARKERS_LISTED_MAX
    return (f'<br><span title="{MARKER_HELP}">{NOWRAP}markers {shown}'
            f"{f' (and {more} older)' if more > 0 else ''}</span></span>")


def _transactions(replica: dict) -> str:
    """`` · LSO n`` where open transactions hold it below the HW, and their count."""
    count = len(replica["open_transactions"])
    lso = (f' · <span style="color:{LSO_COLOUR}">LSO {_e(replica["last_stable_offset"])}</span>'
           if _lso_below_hw(replica) else "")
    return lso + (f" · {count} open transaction{'s' if count != 1 else ''}" if count else "")


def _disagreement(text: str) -> str:
    if not text:
        return ""
    return (f'<br><span style="color:{WARNING_COLOUR};display:inline-block;'
            f'max-width:{NOTE_WIDTH_PX}px">⚠ {_e(text)}</span>')


def _compaction(replica: dict) -> str:
    """For a compacted topic: how far this replica's cleaner got, and the bytes on disk."""
    if not replica.get("compacted"):
        return ""
    return (f"<br>{NOWRAP}compacted · cleaned below {_e(replica['first_dirty_offset'])} · "
            f"{_e(replica['size_bytes'])} B</span>")


def render_groups(snapshot: dict) -> str:
    """One row per classic group: its coordinator (stale claims marked), members and committed
    offsets; then the consumer-protocol (KIP-848) groups, one row per member
    (``render_consumer_groups``), and the share groups (``render_share_groups``)."""
    classic = [g for g in snapshot["groups"]
               if g.get("group_type") not in (CONSUMER_GROUP, SHARE_GROUP)]
    rows = "".join(
        f"<tr>{TD}{_e(g['group'])}{_spark_query(g.get('spark_query'))}</td>"
        f"{TD}{_e(g['state'])}</td>{TD}{_e(g['generation'])}</td>"
        f"{TD}{_e(g['coordinator'])}{_disagreement(g.get('disagreement', ''))}</td>"
        f"{TD}{_e(', '.join(g['members']))}</td>"
        f"{TD}{_offsets(g['offsets'])}</td></tr>"
        for g in classic)
    consumer = render_consumer_groups(snapshot) + render_share_groups(snapshot)
    if not rows:
        return consumer or "<div>no consumer groups</div>"
    return (f"{TABLE}<tr>{TH}group</th>{TH}state</th>{TH}generation</th>{TH}coordinator</th>"
            f"{TH}members</th>{TH}committed (lag)</th></tr>{rows}</table>{consumer}")


def _spark_query(query: str | None) -> str:
    """The mark of a group a Spark query commits its progress into (kafka.group.id)."""
    return "" if query is None else f' <span title="{_e(query)}">(Spark query)</span>'


def render_consumer_groups(snapshot: dict) -> str:
    """The consumer-protocol groups: per member, its epoch against the group's group and
    assignment epochs, its state, what it owns, must revoke, waits for, and its target."""
    rows = []
    for g in snapshot["groups"]:
        if g.get("group_type") != CONSUMER_GROUP:
            continue
        group = (f"{TD}{_e(g['group'])}{_disagreement(g.get('disagreement', ''))}</td>"
                 f"{TD}{_e(g['state'])}</td>{TD}{_e(g['group_epoch'])}</td>"
                 f"{TD}{_e(g['assignment_epoch'])}</td>{TD}{_e(g['assignor'])}</td>")
        members = g["consumer_members"] or [None]
        for member in members:
            if member is None:
                rows.append(f"<tr>{group}{TD}no members</td></tr>")
                continue
            rows.append(
                f"<tr>{group}{TD}{_e(member['client_id'])} ({_e(member['member_id'][:8])})</td>"
                f"{TD}{_e(member['member_epoch'])}</td>{TD}{_e(member['member_state'])}</td>"
                f"{TD}{_pairs(member['assignment'])}</td>"
                f"{TD}{_pairs(member['pending_revocation'])}</td>"
                f"{TD}{_pairs(member['unreleased'])}</td>"
                f"{TD}{_pairs(member['target_assignment'])}</td></tr>")
            group = f'{TD}</td>' * 5
    if not rows:
        return ""
    heads = ("group (consumer protocol)", "state", "group epoch", "assignment epoch", "assignor",
             "member", "member epoch", "member state", "owns", "pending revocation",
             "waits for release", "target assignment")
    return (f"{TABLE}<tr>{''.join(f'{TH}{_e(h)}</th>' for h in heads)}</tr>"
            f"{''.join(rows)}</table>")


def render_share_groups(snapshot: dict) -> str:
    """The share groups (KIP-932): per group its state, epochs and members, and per share
    partition its start and end offsets and how many in-flight records are in each state."""
    rows = []
    for g in snapshot["groups"]:
        if g.get("group_type") != SHARE_GROUP:
            continue
        members = ", ".join(f"{m['client_id']} ({m['member_id'][:8]}, epoch {m['member_epoch']})"
                            for m in g["share_members"]) or "no members"
        shares = "<br>".join(
            f"{_e(p['topic'])}-{_e(p['partition'])}: start offset {_e(p['start_offset'])}, "
            f"end offset {_e(p['end_offset'])}; "
            + _e(", ".join(f"{p['counts'][state]} {state}" for state in RECORD_STATES
                           if p["counts"].get(state)) or "nothing in flight")
            for p in g["share_partitions"])
        rows.append(f"<tr>{TD}{_e(g['group'])}{_disagreement(g.get('disagreement', ''))}</td>"
                    f"{TD}{_e(g['state'])}</td>{TD}{_e(g['group_epoch'])}</td>"
                    f"{TD}{_e(g['assignment_epoch'])}</td>{TD}{_e(members)}</td>"
                    f"{TD}{shares or '-'}</td></tr>")
    if not rows:
        return ""
    heads = ("share group", "state", "group epoch", "assignment epoch", "members",
             "share partitions")
    return (f"{TABLE}<tr>{''.join(f'{TH}{_e(h)}</th>' for h in heads)}</tr>"
            f"{''.join(rows)}</table>")


def _pairs(pairs: list[list]) -> str:
    return _e(" ".join(f"{topic}-{partition}" for topic, partition in pairs) or "-")


def _offsets(offsets: list[dict]) -> str:
    return "<br>".join(
        f"{_e(o['topic'])}-{_e(o['partition'])}: {_e(o['committed'])} "
        f"({_e('?' if o['lag'] is None else o['lag'])})" for o in offsets)


def render_events(snapshot: dict) -> str:
    lines = "".join(
        f"<div><code>{_e(_clock(e['now_ms']))}</code> {_e(e['source'])}: {_e(e['text'])}</div>"
        for e in reversed(snapshot["events"]))
    return f"<div>{lines or 'no events yet'}</div>"


def _clock(now_ms: int) -> str:
    return datetime.datetime.fromtimestamp(now_ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def _e(value: object) -> str:
    return escape(str(value), quote=True)
