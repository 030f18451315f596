"""A live view of a LocalCluster: ``ClusterView(cluster)`` or ``%log_watch``.

Theory of operation: Python holds all the state; the browser (``cluster_view.js``, an anywidget
ES module) only draws it and sends back what the user asked for.

- A background thread takes a snapshot (``snapshot.py``) every ``refresh_s`` and records it in
  a bounded ``SnapshotHistory`` (``history.py``). Only a snapshot that differs from the last
  one is recorded and sent, so an idle cluster costs no widget messages.
- What is sent is one message per change, and it is small: ``delta`` holds a patch
  (``delta.py``) from the ``base`` snapshot to the new one, so at 100 busy partitions it holds
  a few numbers per replica, not the 100 KB snapshot. Every patch is from the base, not from
  the previous snapshot, so a browser view that opens late (or while a cell runs and the
  kernel cannot answer it) draws the current state from the two traits alone. The base is
  replaced by the current snapshot when the patch grows past ``BASE_PATCH_RATIO_MAX`` of it
  or the base is older than ``BASE_AGE_MS_MAX``. ``delta.point`` and ``base.series`` are what
  the charts draw (``history.series_point``).
- ``base`` and ``delta`` (and ``snapshot``) are plain Python traits, for scripts and tests;
  what is synced is their JSON, zlib-compressed (``base_z``, ``delta_z``: binary buffers on
  the comm; a patch's keys repeat per replica, so it shrinks ~10x; the browser inflates them
  with ``DecompressionStream``). ``timeline`` and ``marks`` are synced in the same message.
- Each snapshot is taken with the last one, so a broker that stops answering (paused, killed)
  keeps its replicas on screen, greyed, as it last reported them.
- A click on a broker's action sends ``{"type": "act", "id", "action", "broker_id"}``, on a
  controller's ``{"type": "act", "id", "action", "controller_id"}``. The browser shows it
  pending at once; comm messages wait while a cell runs, so the kernel takes it up only when
  it is free. The fault runs on a thread of its own (a restart waits for the process to
  rejoin, which must not block the kernel), one at a time; its outcome (``running``, then
  ``done``, ``refused`` with the reason, or ``failed``) is the ``action`` trait, which names
  the broker or controller as the message did.
- ``{"type": "replay", "seq"}`` puts a recorded snapshot in ``replay``; ``{"type": "live"}``
  empties it. Live snapshots keep arriving underneath; the browser shows the replayed one.
- ``show_internal``, set by the browser's checkbox, folds or unfolds internal topics.
- ``{"type": "hello"}`` is answered with the same: a view that gets no answer within seconds
  says so (a cell is running, or it was drawn from a saved notebook whose kernel is gone).
- Closing leaves a picture: the view is displayed with a display id, and ``close()`` (also at
  kernel exit, for views still open) replaces every place it was shown with a static HTML
  picture of its last snapshot (``render.render_closed_view``), so a notebook saved after that
  reopens with the picture, not ipywidgets' "Error displaying widget: model not found". A
  notebook saved while a view is open keeps only the widget's reference: JupyterLab draws it
  again from the saved widget state if its "Save Widget State Automatically" setting is on
  (``scripts/setup.sh`` turns it on for the venv's JupyterLab).
"""

from __future__ import annotations

import atexit
import itertools
import json
import threading
import time
import weakref
import zlib
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..cluster import ClusterError, LocalCluster
from .actions import ACTION_HELP, ACTIONS, CONTROLLER_ACTION_HELP, apply, apply_to_controller
from .delta import diff
from .history import SnapshotHistory, series_point
from .render import render_closed_view
from .snapshot import take_snapshot

REFRESH_S = 1.0  # 1 Hz: fast enough to watch an election, slow enough to cost nothing
BASE_PATCH_RATIO_MAX = 0.5  # a patch past half the base's size: send a new base instead
BASE_AGE_MS_MAX = 60_000  # a late-opening view's charts miss at most this much history
REFRESH_S_MIN = 0.1
CLOSE_JOIN_REFRESHES = 5  # close() waits this many refresh periods for the thread to end
ZLIB_LEVEL = 6  # zlib's default: ~10x on a patch, ~0.5 ms for 30 KB
HERE = Path(__file__).parent
_OPEN: weakref.WeakSet[ClusterView] = weakref.WeakSet()  # closed at exit: see _close_open_views


def _compressed(value: dict) -> bytes:
    """``value`` as zlib-compressed JSON, what the browser inflates (``DecompressionStream``)."""
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), ZLIB_LEVEL)


class ClusterView(anywidget.AnyWidget):
    """Brokers as nodes you can break, every replica's log, groups, and a replayable timeline.
    Python is the single source of state: see the module docstring."""

    _esm = HERE / "cluster_view.js"
    _css = HERE / "cluster_view.css"

    snapshot = traitlets.Dict()  # the cluster now (take_snapshot); not synced: base + delta are
    base = traitlets.Dict()  # {"seq", "taken_ms", "snapshot", "series"}
    delta = traitlets.Dict()  # {"base_seq", "seq", "patch", "point"}
    base_z = traitlets.Bytes(b"").tag(sync=True)  # base as compressed JSON
    delta_z = traitlets.Bytes(b"").tag(sync=True)  # delta as compressed JSON
    timeline = traitlets.Dict().tag(sync=True)  # kept history: first/last seq and time
    # events on the timeline, each naming its snapshot
    marks: traitlets.List[Any] = traitlets.List().tag(sync=True)
    replay = traitlets.Dict().tag(sync=True)  # {} live, else {"seq", "taken_ms", "snapshot"}
    # the last action: id, action, broker_id or controller_id, state, text
    action = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)  # why the cluster cannot be read, or ""
    show_internal = traitlets.Bool(False).tag(sync=True)
    action_help = traitlets.Dict(ACTION_HELP).tag(sync=True)  # the buttons' tooltips
    controller_action_help = traitlets.Dict(CONTROLLER_ACTION_HELP).tag(sync=True)

    def __init__(self, cluster: LocalCluster, refresh_s: float = REFRESH_S) -> None:
        assert refresh_s >= REFRESH_S_MIN, refresh_s
        super().__init__()
        self.cluster = cluster
        self.refresh_s = refresh_s
        self.history = SnapshotHistory()
        # Cluster calls one at a time: a refresh must not be mid-request when a fault kills a
        # broker, and two refreshes must not publish in an order the browser could see reversed.
        self._cluster_lock = threading.Lock()
        self._publish_lock = threading.Lock()  # history and synced traits
        self._acting = threading.Lock()  # held while a fault from the browser runs
        self._action_ids = itertools.count(1)
        self._stop = threading.Event()
        self._wake = threading.Event()  # refresh now, not at the next tick
        self._snapshot_ms: int | None = None  # when self.snapshot was taken
        self._displays: list[Any] = []  # IPython DisplayHandles: where it is shown
        self.on_msg(self._on_message)
        _OPEN.add(self)
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="pylog-cluster-view", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:  # anywidget's text/plain, where no widget can be drawn
        if not hasattr(self, "cluster"):
            return "ClusterView()"
        brokers = len(self.cluster.brokers)
        return (f"ClusterView({brokers} broker{'s' if brokers != 1 else ''}, "
                f"every {self.refresh_s:g} s)")

    def _ipython_display_(self) -> None:
        """Display the widget under a display id of its own, so that ``close()`` can put a
        picture of its last state in its place."""
        from IPython.display import display

        bundle = self._repr_mimebundle_()
        if bundle is None:  # closed: nothing to show
            return
        data, metadata = bundle
        self._displays.append(display(data, metadata=metadata, raw=True, display_id=True))

    # -- refreshing ------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Take a snapshot now; the browser gets it only if anything changed."""
        with self._cluster_lock:
            now_ms = int(time.time() * 1000)
            try:
                snapshot = take_snapshot(self.cluster, previous=self.snapshot,
                                         internal=self.show_internal, now_ms=now_ms,
                                         previous_ms=self._snapshot_ms)
            except (OSError, ValueError, KeyError, ClusterError) as error:
                self.status = f"cannot read the cluster: {error}"
                return
            self._snapshot_ms = now_ms  # the traffic rates of the next one are since now
            self._publish(snapshot)

    def _publish(self, snapshot: dict) -> None:
        with self._publish_lock:
            entry = self.history.record(snapshot, int(time.time() * 1000))
            with self.hold_sync():  # one message, however many traits change
                self.status = ""
                if entry is None:
                    return
                patch = diff(self.base.get("snapshot", {}), snapshot)
                if self._rebase_due(entry, patch):
                    self.base = {"seq": entry.seq, "taken_ms": entry.taken_ms,
                                 "snapshot": snapshot, "series": self.history.series()}
                    self.base_z = _compressed(self.base)
                    patch = {}
                self.delta = {"base_seq": self.base["seq"], "seq": entry.seq, "patch": patch,
                              "point": series_point(entry)}
                self.delta_z = _compressed(self.delta)
                self.snapshot = snapshot
                timeline = self.history.timeline()
                self.marks = timeline.pop("marks")
                self.timeline = timeline

    def _rebase_due(self, entry, patch: dict) -> bool:
        """Whether to send ``entry`` whole as the new base rather than a patch from the old."""
        if not self.base or entry.taken_ms - self.base["taken_ms"] > BASE_AGE_MS_MAX:
            return True
        kept = self.history.at(self.base["seq"])
        base_bytes = kept.size_bytes if kept is not None else 0  # evicted: time for a new one
        return len(json.dumps(patch, separators=(",", ":"))) > BASE_PATCH_RATIO_MAX * base_bytes

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.refresh_s)
            self._wake.clear()
            if not self._stop.is_set():
                self.refresh()

    @traitlets.observe("show_internal")
    def _unfold(self, _change) -> None:
        self._wake.set()

    # -- replay ----------------------------------------------------------------------------------

    def show(self, seq: int | None) -> bool:
        """Replay recorded snapshot ``seq`` (None: back to live); False if it is not kept."""
        with self._publish_lock:
            if seq is None:
                self.replay = {}
                return True
            entry = self.history.at(seq)
            if entry is None:
                return False
            self.replay = {"seq": entry.seq, "taken_ms": entry.taken_ms,
                           "snapshot": entry.snapshot}
            return True

    # -- faults ----------------------------------------------------------------------------------

    def act(self, action: str, broker_id: int | None = None, action_id: str | None = None,
            *, controller_id: int | None = None) -> str:
        """Apply ``action`` (kill, restart, ...) to broker ``broker_id``, or to controller
        ``controller_id``, unless it cannot apply, then refresh; what happened, as the view
        shows it."""
        assert action in ACTIONS, action
        assert (broker_id is None) != (controller_id is None), "a broker or a controller"
        target = ("broker", broker_id) if controller_id is None else ("controller", controller_id)
        action_id = action_id or f"py-{next(self._action_ids)}"
        self._set_action(action_id, action, target, "running", f"{action} {target[0]} {target[1]}")
        with self._cluster_lock:
            if controller_id is None:
                assert broker_id is not None
                state, text = apply(self.cluster, action, broker_id)
            else:
                state, text = apply_to_controller(self.cluster, action, controller_id)
        self.refresh()  # first: the outcome is shown with the state it brought
        self._set_action(action_id, action, target, state, text)
        return text

    def _set_action(self, action_id: str, action: str, target: tuple[str, int | None],
                    state: str, text: str) -> None:
        kind, node_id = target
        with self._publish_lock:
            self.action = {"id": action_id, "action": action, f"{kind}_id": node_id,
                           "state": state, "text": text}

    def _act_in_background(self, action: str, target: tuple[str, int], action_id: str) -> None:
        kind, node_id = target
        try:
            if kind == "controller":
                self.act(action, action_id=action_id, controller_id=node_id)
            else:
                self.act(action, node_id, action_id)
        finally:
            self._acting.release()

    def _on_message(self, _widget, content: dict, _buffers) -> None:
        """A click in the browser: act on a broker or controller, replay a snapshot, or go back
        to live."""
        kind = content.get("type")
        if kind == "replay" and isinstance(content.get("seq"), int):
            if not self.show(content["seq"]):
                self.status = f"snapshot {content['seq']} is no longer kept"
        elif kind == "live":
            self.show(None)
        elif kind == "hello":  # the browser asks whether a kernel is behind the view
            self.send({"type": "hello"})
        elif kind == "act":
            self._on_act(content)

    def _on_act(self, content: dict) -> None:
        action = content.get("action")
        kind = "controller" if "controller_id" in content else "broker"
        node_id = content.get(f"{kind}_id")
        known = self.cluster.controllers if kind == "controller" else self.cluster.brokers
        action_id = str(content.get("id", ""))[:64]
        if action not in ACTIONS or type(node_id) is not int or node_id not in known:
            self._set_action(action_id, str(action), (kind, -1), "refused",
                             f"unknown action {action!r} on {kind} {node_id!r}")
            return
        if not self._acting.acquire(blocking=False):
            self._set_action(action_id, action, (kind, node_id), "refused",
                             f"{action} refused: {self.action.get('text', 'an action')} "
                             "is still running")
            return
        threading.Thread(target=self._act_in_background, args=(action, (kind, node_id), action_id),
                         name="pylog-cluster-view-act", daemon=True).start()

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop refreshing and remove the widget, leaving a static picture of its last state
        wherever it was displayed."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.refresh_s * CLOSE_JOIN_REFRESHES)
        _OPEN.discard(self)
        self._leave_pictures()
        super().close()

    def _leave_pictures(self) -> None:
        """Replace each display of the widget with its last snapshot as HTML (text, escaped:
        render.py); the browser drops the widget's view with it."""
        displays, self._displays = self._displays, []
        if not displays or not self.snapshot:
            return
        picture = {"text/html": render_closed_view(self.snapshot, int(time.time() * 1000)),
                   "text/plain": f"{self!r}, closed"}
        for handle in displays:
            handle.update(picture, raw=True)


@atexit.register
def _close_open_views() -> None:
    """At kernel exit, close the views still open, so that a frontend still listening keeps a
    picture of each rather than a reference to a widget that is gone."""
    for view in list(_OPEN):
        view.close()
