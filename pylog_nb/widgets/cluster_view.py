"""A live view of a LocalCluster with fault buttons: ``ClusterView(cluster)`` or ``%log_watch``.

Theory of operation: a background thread takes a snapshot (``snapshot.py``) every
``refresh_s`` and stores it in the ``snapshot`` trait only when it differs from the last one; an
observer re-renders the HTML panes, and a pane is sent to the browser only when its HTML
changed. An idle cluster therefore costs no widget messages. Each snapshot is taken with the
last one, so a broker that stops answering (paused, killed) keeps its replicas on screen,
greyed, as it last reported them. Buttons act on the broker chosen in the dropdown; what they
do and any failure show on one status line.
"""

from __future__ import annotations

import threading
from html import escape

import ipywidgets as widgets
import traitlets

from ..cluster import ClusterError, LocalCluster
from .render import render_brokers, render_events, render_groups, render_partitions
from .snapshot import take_snapshot

REFRESH_S = 1.0  # 1 Hz: fast enough to watch an election, slow enough to cost nothing
REFRESH_S_MIN = 0.1
ACTIONS = ("kill", "restart", "pause", "resume", "isolate", "heal")


class ClusterView(widgets.VBox):
    snapshot = traitlets.Dict()

    def __init__(self, cluster: LocalCluster, refresh_s: float = REFRESH_S) -> None:
        assert refresh_s >= REFRESH_S_MIN, refresh_s
        self.cluster = cluster
        self.refresh_s = refresh_s
        self.panes = {name: widgets.HTML() for name in ("brokers", "partitions", "groups",
                                                       "events")}
        self.status = widgets.HTML()
        self.broker = widgets.Dropdown(options=sorted(cluster.brokers), description="broker")
        self.buttons = {action: widgets.Button(description=action) for action in ACTIONS}
        for action, button in self.buttons.items():
            button.on_click(lambda _button, action=action: self.act(action))
        super().__init__([
            self.panes["brokers"],
            widgets.HBox([self.broker, *self.buttons.values()]),
            self.status,
            widgets.HTML("<b>Partitions</b> (bar: dark up to the HW, light up to the LEO)"),
            self.panes["partitions"],
            widgets.HTML("<b>Consumer groups</b>"), self.panes["groups"],
            widgets.HTML("<b>Latest events</b>"), self.panes["events"],
        ])
        self._stop = threading.Event()
        # One thing at a time: a refresh must not be mid-request when a button kills a broker,
        # and the two must not update the panes in an order the browser could see reversed.
        self._lock = threading.Lock()
        self._unreadable = False  # the status line shows a read failure
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="pylog-cluster-view", daemon=True)
        self._thread.start()

    # -- refreshing ------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Take a snapshot now; the panes follow if anything changed."""
        with self._lock:
            try:
                snapshot = take_snapshot(self.cluster, previous=self.snapshot)
            except (OSError, ClusterError, KeyError) as error:
                self._say(f"cannot read the cluster: {error}")
                self._unreadable = True
                return
            if self._unreadable:  # readable again: the failure no longer applies
                self._say("")
            if snapshot != self.snapshot:
                self.snapshot = snapshot

    @traitlets.observe("snapshot")
    def _render(self, change) -> None:
        snapshot = change["new"]
        for name, render in (("brokers", render_brokers), ("partitions", render_partitions),
                             ("groups", render_groups), ("events", render_events)):
            html = render(snapshot)
            if self.panes[name].value != html:
                self.panes[name].value = html

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh()

    # -- faults ----------------------------------------------------------------------------------

    def act(self, action: str) -> None:
        """Apply ``action`` (kill, restart, ...) to the chosen broker, then refresh."""
        assert action in ACTIONS, action
        broker_id = self.broker.value
        with self._lock:
            try:
                getattr(self.cluster, action)(broker_id)
            except (ClusterError, OSError) as error:
                self._say(f"{action} broker {broker_id} failed: {error}")
                return
            self._say(f"{action} broker {broker_id}: done")
        self.refresh()

    def _say(self, text: str) -> None:
        self._unreadable = False
        self.status.value = f"<i>{escape(text)}</i>" if text else ""

    def close(self) -> None:
        """Stop refreshing and remove the widget."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.refresh_s * 5)
        super().close()
