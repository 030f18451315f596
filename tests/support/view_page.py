"""The live view's ES module on a bare page, without JupyterLab or a kernel: a stand-in for the
widget model holds the traits as ClusterView would sync them (``base_z`` and ``delta_z``
compressed the way ``cluster_view._compressed`` does), and Chromium draws the snapshot a test
wrote. Fast enough to pin what the view draws (geometry, texts, glyphs) for cases a real
cluster reaches only slowly; tests/test_browser.py also runs the view in JupyterLab.

``snapshot`` builds a snapshot the way ``widgets.snapshot`` shapes one, from short replica
descriptions, so a test states only what matters to it.
"""

from __future__ import annotations

import base64
from pathlib import Path

from pylog_nb.widgets import cluster_view

WIDGETS = Path(cluster_view.__file__).parent
ESM = (WIDGETS / "cluster_view.js").read_text()
CSS = (WIDGETS / "cluster_view.css").read_text()

# Load the module from a blob (as anywidget does) and render it with a stand-in model; the
# messages the view sends are kept in window.sent. Like a free kernel, the model answers the
# view's hello at once, unless ``kernel`` is false (a view drawn from saved widget state);
# window.answer() answers it later (a kernel whose cell ended).
RENDER_JS = """async ({esm, values, kernel}) => {
  const bytes = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const traits = {...values, base_z: bytes(values.base_z), delta_z: bytes(values.delta_z)};
  window.sent = [];
  const handlers = {};
  window.answer = () => handlers["msg:custom"]?.({type: "hello"});
  const model = {
    get: (name) => traits[name], set: (name, value) => { traits[name] = value; },
    save_changes() {}, on: (name, handler) => { handlers[name] = handler; }, off() {},
    send: (message) => {
      window.sent.push(message);
      if (kernel && message.type === "hello") setTimeout(window.answer, 0);
    },
  };
  const url = URL.createObjectURL(new Blob([esm], {type: "text/javascript"}));
  const module = await import(url);
  module.default.render({model, el: document.getElementById("root")});
}"""

# Each non-ASCII character of the view's text (titles included) that the page's fonts draw
# as the box of a missing glyph: compared, drawn on a canvas, with a code point no font has.
MISSING_GLYPHS_JS = """(root) => {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 40;
  const context = canvas.getContext("2d");
  context.font = `24px ${getComputedStyle(root).fontFamily}`;
  const drawn = (text) => {
    context.clearRect(0, 0, 40, 40);
    context.fillText(text, 4, 30);
    return context.getImageData(0, 0, 40, 40).data.join(",");
  };
  const nowhere = [drawn("\\uffff"), drawn("\\u{10fffd}")];
  const texts = [...root.querySelectorAll("*")].map((node) => node.textContent).join("")
    + [...root.querySelectorAll("[title]")].map((node) => node.title).join("");
  const chars = [...new Set([...texts].filter((c) => c.codePointAt(0) > 127))];
  return chars.filter((c) => nowhere.includes(drawn(c)));
}"""


def replica(role: str, epoch: int, leo: int, *, hw: int | None = None, last_known: bool = False,
            disagreement: str = "", lag_records: int | None = None) -> dict:
    """One replica as a snapshot holds it: its role and epoch, HW (default: its LEO) and LEO,
    its leader-epoch cache (one epoch from offset 0)."""
    entry = {"role": role, "leader": -1, "leader_epoch": epoch, "isr": [],
             "log_start_offset": 0, "high_watermark": leo if hw is None else hw,
             "log_end_offset": leo, "last_stable_offset": leo if hw is None else hw,
             "open_transactions": [], "markers": [], "epochs": [[epoch, 0]],
             "compacted": False, "first_dirty_offset": 0, "last_known": last_known,
             "disagreement": disagreement}
    if lag_records is not None:
        entry["lag_records"], entry["behind_since_ms"] = lag_records, None
    return entry


def partition(topic: str, number: int, leader: int, epoch: int, isr: list[int],
              replicas: dict[int, dict], assigned: list[int] | None = None) -> dict:
    return {"topic": topic, "partition": number, "leader": leader, "leader_epoch": epoch,
            "isr": isr, "assigned": assigned or list(replicas), "replicas": replicas}


def snapshot(brokers: dict[int, str], partitions: list[dict], events: list[dict] | None = None,
             silent_since_ms: int | None = None) -> dict:
    """Brokers in the given states (a paused or down one silent since ``silent_since_ms``),
    three controllers with controller 1 active, and the partitions."""
    controllers = [{"controller_id": c, "state": "up", "role": "leader" if c == 1 else "follower",
                    "active": c == 1, "epoch": 4, "leader_id": 1, "high_watermark": 80,
                    "log_end_offset": 80, "last_known": False, "lag": 0, "stale": False}
                   for c in (1, 2, 3)]
    return {
        "brokers": [{"broker_id": b, "state": state, "fenced": False, "stats": None,
                     "rates": None, **({"silent_since_ms": silent_since_ms}
                                       if state in ("paused", "down") else {})}
                    for b, state in brokers.items()],
        "controllers": controllers, "active_controller": {"controller_id": 1, "epoch": 4},
        "authority": "controller", "partitions": partitions, "folded": {}, "groups": [],
        "events": events or []}


def show(browser, shown: dict, *, marks: list[dict] | None = None, taken_ms: int,
         replaying: bool = False, viewport: dict | None = None, kernel: bool = True):
    """A new page of ``browser`` drawing ``shown`` (live, or as a replayed snapshot) with the
    timeline ``marks``, the model answering as a free kernel would unless not ``kernel``;
    returns the page once the view has drawn its partitions."""
    page = browser.new_page(viewport=viewport or {"width": 1400, "height": 900})
    page.set_content('<!doctype html><html><body style="margin:0"><div id="root"></div></body>'
                     "</html>")
    page.add_style_tag(content=CSS)
    marks = marks or []
    seqs = [m["seq"] for m in marks] + [1]
    times = [m["now_ms"] for m in marks] + [taken_ms]
    base = {"seq": 1, "taken_ms": taken_ms, "snapshot": shown, "series": []}
    values = {
        "base_z": _encoded(base),
        "delta_z": _encoded({"base_seq": 1, "seq": 1, "patch": {}, "point": None}),
        "timeline": {"first_seq": min(seqs), "last_seq": max(seqs) + 1,
                     "first_ms": min(times), "last_ms": max(times)},
        "marks": marks, "action": {}, "status": "", "show_internal": False,
        "replay": {"seq": 1, "taken_ms": taken_ms, "snapshot": shown} if replaying else {},
        "action_help": {"kill": "SIGKILL"}, "controller_action_help": {"kill": "SIGKILL"},
    }
    page.evaluate(RENDER_JS, {"esm": ESM, "values": values, "kernel": kernel})
    page.locator(".pylog-partition").first.wait_for()
    return page


def _encoded(value: dict) -> str:
    return base64.b64encode(cluster_view._compressed(value)).decode()
