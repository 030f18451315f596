"""HTML for a cluster snapshot. Every value passes through ``html.escape``: group ids, client
ids and event texts come from clients and are untrusted."""

from __future__ import annotations

import datetime
from html import escape

BAR_WIDTH_PX = 120
STATE_COLOURS = {"up": "#2e7d32", "paused": "#f9a825", "isolated": "#ef6c00", "down": "#c62828"}


def render_brokers(snapshot: dict) -> str:
    badges = "".join(
        f'<span style="margin-right:12px">broker {_e(b["broker_id"])} '
        f'<b style="color:{STATE_COLOURS.get(b["state"], "#555")}">{_e(b["state"])}</b></span>'
        for b in snapshot["brokers"])
    return f"<div>{badges}</div>"


def render_partitions(snapshot: dict) -> str:
    """One row per partition: leader, epoch, ISR, then each replica's LEO/HW as a bar."""
    brokers = [b["broker_id"] for b in snapshot["brokers"]]
    head = "".join(f"<th>broker {_e(b)}</th>" for b in brokers)
    rows = "".join(_partition_row(p, brokers) for p in snapshot["partitions"])
    if not rows:
        rows = f'<tr><td colspan="{4 + len(brokers)}">no topics yet</td></tr>'
    return (f"<table><tr><th>partition</th><th>leader</th><th>epoch</th><th>ISR</th>{head}</tr>"
            f"{rows}</table>")


def _partition_row(partition: dict, brokers: list[int]) -> str:
    replicas = partition["replicas"]
    top = max([r["log_end_offset"] for r in replicas.values()] + [1])
    cells = "".join(
        f"<td>{_replica_cell(replicas[b], top, b == partition['leader'])}</td>" if b in replicas
        else "<td></td>" for b in brokers)
    leader = partition["leader"] if partition["leader"] >= 0 else "none"
    return (f"<tr><td>{_e(partition['topic'])}-{_e(partition['partition'])}</td>"
            f"<td>{_e(leader)}</td><td>{_e(partition['leader_epoch'])}</td>"
            f"<td>{_e(partition['isr'])}</td>{cells}</tr>")


def _replica_cell(replica: dict, top: int, leads: bool) -> str:
    """A bar: filled up to the HW, lighter up to the LEO; the numbers beside it."""
    hw_px = BAR_WIDTH_PX * replica["high_watermark"] // top
    leo_px = BAR_WIDTH_PX * replica["log_end_offset"] // top
    bar = (f'<div style="position:relative;width:{BAR_WIDTH_PX}px;height:8px;background:#eee">'
           f'<div style="position:absolute;width:{leo_px}px;height:8px;background:#90caf9"></div>'
           f'<div style="position:absolute;width:{hw_px}px;height:8px;background:#1565c0"></div>'
           f"</div>")
    role = "★ leader" if leads else _e(replica["role"])
    return (f"{bar}<small>{role} · HW {_e(replica['high_watermark'])} · "
            f"LEO {_e(replica['log_end_offset'])}{_compaction(replica)}</small>")


def _compaction(replica: dict) -> str:
    """For a compacted topic: how far this replica's cleaner got, and the bytes on disk."""
    if not replica.get("compacted"):
        return ""
    return (f"<br>compacted · cleaned below {_e(replica['first_dirty_offset'])} · "
            f"{_e(replica['size_bytes'])} B")


def render_groups(snapshot: dict) -> str:
    rows = "".join(
        f"<tr><td>{_e(g['group'])}</td><td>{_e(g['state'])}</td><td>{_e(g['generation'])}</td>"
        f"<td>{_e(g['coordinator'])}</td><td>{_e(', '.join(g['members']))}</td>"
        f"<td>{_offsets(g['offsets'])}</td></tr>"
        for g in snapshot["groups"])
    if not rows:
        return "<div>no consumer groups</div>"
    return ("<table><tr><th>group</th><th>state</th><th>generation</th><th>coordinator</th>"
            f"<th>members</th><th>committed (lag)</th></tr>{rows}</table>")


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
