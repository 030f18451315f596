"""Snapshots of a real cluster recorded as ``ClusterView`` records them, for view tests that
draw what they recorded in a bare page (``view_page.show``)."""

from __future__ import annotations

import time

from pylog_nb.widgets.history import SnapshotHistory
from pylog_nb.widgets.snapshot import take_snapshot

from . import view_page
from .clients import wait_for


class Recorder:
    """Snapshots of the real cluster, each taken with the last (as ClusterView takes them),
    recorded in a SnapshotHistory whose marks the timeline draws."""

    def __init__(self, cluster, *, wait_s: float, poll_s: float) -> None:
        self.cluster = cluster
        self.wait_s, self.poll_s = wait_s, poll_s
        self.history = SnapshotHistory()
        self.last: dict | None = None
        self.taken_ms: dict[int, int] = {}  # id of a snapshot -> when it was taken

    def take(self) -> dict:
        now_ms = int(time.time() * 1000)
        previous_ms = self.taken_ms.get(id(self.last))
        self.last = take_snapshot(self.cluster, previous=self.last, now_ms=now_ms,
                                  previous_ms=previous_ms)
        self.history.record(self.last, now_ms)
        self.taken_ms[id(self.last)] = now_ms
        return self.last

    def until(self, condition, what: str) -> dict:
        def taken() -> dict | None:
            snapshot = self.take()
            return snapshot if condition(snapshot) else None

        return wait_for(taken, what, self.wait_s, poll_s=self.poll_s)

    def show(self, browser, shown: dict):
        """A bare page drawing ``shown`` live, with every mark recorded so far."""
        return view_page.show(browser, shown, marks=self.history.timeline()["marks"],
                              taken_ms=self.taken_ms[id(shown)],
                              viewport={"width": 1400, "height": 1100})
