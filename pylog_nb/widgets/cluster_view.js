// The browser half of ClusterView (cluster_view.py): draws the synced state, sends clicks back.
//
// Python holds every piece of state (the snapshot, the history, the outcome of an action); this
// module keeps only what is about the page: which broker or controller is selected, which of its own clicks
// are still pending, and the chart points it has seen. The live snapshot is the "base" trait
// with the "delta" trait's patch applied (applyPatch: the rules of delta.py); every patch is
// from the base, so a view that opens late needs nothing from the kernel to draw the present.
// Both come as zlib-compressed JSON (base_z, delta_z), inflated here in arrival order. Everything that came from the cluster or its clients (topic names,
// group ids, client ids, event texts) goes into the page as text: textContent, text nodes and
// attribute values, never innerHTML or markup built from strings.

const SVG_NS = "http://www.w3.org/2000/svg";
const EPOCH_COLOURS = 8; // --pylog-epoch-0 .. -7 in cluster_view.css, reused round the circle
const BAR_UNITS = 300; // a replica bar's viewBox width; the bar stretches to its cell
const NODE_GAP = 130;
const NODE_R = 22;
const CTRL_GAP = 196; // a controller's column: three lines of text under its box
const CTRL_W = 124;
const CTRL_H = 28;
const CTRL_Y = 38; // the controllers' boxes (centre); their text runs to the quorum frame's foot
const QUORUM_FOOT = 106; // where the quorum frame ends and the links to the brokers begin
const BROKER_Y_QUORUM = 200; // the brokers' row under a quorum of controllers
const STRIP_UNITS = 600;
const MARK_HIT_UNITS = 8; // a mark's hover and click target, in strip units (~14 px)
const MARK_STACK_UNITS = MARK_HIT_UNITS; // marks closer than one target are one stack
const MARKS_LISTED_MAX = 20; // a stack's tooltip lists its oldest; more would outgrow the screen
const SPARK_W = 120; // a sparkline's viewBox width (one unit per point at most)
const SPARK_H = 22;
const SERIES_POINTS_MAX = 120; // as history.py: the points a sparkline draws
const DRAW_MEASURE = "pylog-view-draw"; // see drawShown
const PATCH_NEW = "$new"; // delta.py's markers
const PATCH_DELETE = "$del";
const STATES = ["up", "paused", "isolated", "down", "fenced"];
const CATEGORIES = ["election", "controller", "isr", "broker", "truncation", "group", "share", "security", "topic", "other"];
const OVERVIEW_PARTITIONS_MIN = 13; // more partitions than this: a grid of all, details paged
const PAGE_PARTITIONS = 12; // partitions drawn in detail at once (each is 3+ bars)
const HEALTH_HELP = {
  ok: "every assigned replica is in the ISR",
  under: "under-replicated: a replica is out of the ISR",
  offline: "offline: no leader, nothing can be read or written",
  disagree: "a broker's own view differs from the controller's",
};
const STATE_HELP = {
  up: "running, registered with the controller",
  paused: "SIGSTOP: frozen, answers nothing; its replicas show their last known state",
  isolated: "cut off from its peers and the controller; clients still reach it",
  down: "process dead; its replicas show their last known state",
  fenced: "running, but the controller has fenced it: it may lead nothing",
};
const CONTROLLER_STATE_HELP = {
  up: "running, a voter of the metadata quorum",
  paused: "SIGSTOP: frozen, answers nothing; it shows what it last said, greyed",
  isolated: "cut off from the other voters (both ways); brokers still reach it",
  down: "process dead; it shows what it last said, greyed",
};
const CATEGORY_HELP = {
  election: "leader elected, or partition left without a leader",
  isr: "ISR shrink or expand (and a leader asking for one)",
  controller: "a new active controller (the quorum's leader at a new epoch), or none; or a controller's state changed in this view",
  broker: "broker registered, fenced, unfenced, or its state changed in this view",
  truncation: "a follower truncated its log to match its leader",
  group: "consumer group state change or member removed; for a consumer-protocol (KIP-848) group, each step of an incremental rebalance the view saw: group epoch bumped, target assignment computed, a member told to revoke and having revoked, a member caught up to an epoch, partitions released to a member",
  share: "share group (KIP-932), as the view saw it between two snapshots: a member joined or left; acquired records came back to the group (their member left, their lock ran out, or they were released); records archived (rejected, or delivered as often as the delivery limit allows)",
  security: "a client refused: it failed to sign in (SASL), or the ACLs denied a principal an operation on a resource",
  topic: "topic or partition created, deleted or reconfigured",
  other: "anything else",
};
const LSO_HELP = "the last stable offset: read_committed consumers read only below it. The first record of the oldest open transaction holds it there until that transaction's commit or abort marker is written; with no open transaction it is the HW";
const MARKER_HELP = "a transaction marker: an offset no consumer receives. The commit or abort of a transaction is a control record written into each partition it touched; read_committed consumers learn from it which records to deliver or drop, and every consumer skips its offset";
// A free kernel answers the view's hello in milliseconds, a busy one when its cell ends, and a
// view drawn from a saved notebook's widget state never: after this long, say which it may be.
const KERNEL_ANSWER_MS = 5000;
const NO_KERNEL_TEXT = "⚠ no answer from the kernel yet: a cell is running (clicks wait until it ends), "
  + "or this view was saved with the notebook and the kernel that drew it is gone: it shows the cluster as it was then";
const MARKERS_LISTED_MAX = 4; // the newest markers a replica's note names (the bar shows them all)
// Consumer groups of the consumer rebalance protocol (KIP-848): Kafka's names, explained.
const CONSUMER_GROUP = "consumer"; // the group_type of a KIP-848 group ("classic" otherwise)
const MEMBER_ID_SHOWN = 8; // characters of a member id shown (the whole one on hover)
const LEFT_STATIC_EPOCH = -2; // a static member that left and keeps its partitions
const CONSUMER_PROTOCOL_HELP = "a consumer group of the consumer rebalance protocol (KIP-848, group.protocol=consumer): the coordinator computes the assignment and members move to it one heartbeat at a time, each keeping the partitions it is not asked to give up";
const GROUP_EPOCH_HELP = "group epoch: bumped whenever what the assignor sees changes (a member joins, leaves or changes its subscription; a subscribed topic is created or grows)";
const ASSIGNMENT_EPOCH_HELP = "assignment epoch: the group epoch the target assignment was computed for; behind the group epoch only while the group is Assigning";
const MEMBER_EPOCH_HELP = "member epoch: the assignment epoch this member has caught up with; it takes the new epoch once it has revoked what it must give up";
const CONSUMER_GROUP_STATE_HELP = {
  Empty: "no members",
  Assigning: "the group epoch is ahead of the assignment epoch: a new target assignment is due",
  Reconciling: "members are moving to the target assignment: some are not yet stable at the assignment epoch",
  Stable: "every member is stable at the assignment epoch and owns its target",
  Dead: "being removed",
};
const MEMBER_STATE_TEXT = {
  stable: ["stable", "owns its part of the target assignment at its epoch"],
  unrevoked_partitions: ["revoking", "unrevoked partitions: it must revoke the partitions marked ↩ before it may take the assignment epoch"],
  unreleased_partitions: ["waiting for release", "unreleased partitions: it is at the assignment epoch, but other members still own partitions of its target (dashed); it gets each once released"],
  unknown: ["unknown", "Kafka's UNKNOWN member state"],
};
const PARTITION_KIND_HELP = {
  owned: "owned: assigned to this member at its epoch, and in its target",
  revoking: "pending revocation: the member still owns it, must give it up (not in its target) and stays at its old epoch until it has",
  unreleased: "in its target, waiting: another member still owns it and has not released it",
  incoming: "in its target, free: handed to it at its next heartbeat (once it has revoked what it must)",
};
// A group a Spark query commits its progress into (the pylog source's kafka.group.id)
const SPARK_QUERY_HELP = "a Spark structured streaming query commits each finished micro-batch's end offsets here, without joining the group (the pylog source's kafka.group.id): its lag is the query's";

// Share groups (KIP-932): a topic read as a queue. Kafka's names, explained.
const SHARE_GROUP = "share"; // the group_type of a share group
const MEMBER_COLOURS = 8; // --pylog-member-0 .. -7 in cluster_view.css, one per member of a group
const SHARE_CHUNK = 10; // in-flight cells per labelled run: the label is the run's first offset
const SHARE_GROUP_HELP = "a share group (KIP-932): its members read the topic as a queue. Several members may read one partition; each record is acquired by one member at a time, under a lock, and settled with an acknowledgement: accept, release (back to the group, delivered again) or reject (archived)";
const SHARE_GROUP_STATE_HELP = { Empty: "no members", Stable: "members are reading", Dead: "being removed" };
const SHARE_GROUP_EPOCH_HELP = "group epoch: bumped whenever a member joins or leaves, changes its subscription, or a subscribed topic is created or grows";
const SHARE_ASSIGNMENT_EPOCH_HELP = "assignment epoch: the group epoch the assignment was computed for (the simple assignor: every subscribed partition to at least one member; with more members than partitions, several members share a partition)";
const SHARE_MEMBER_EPOCH_HELP = "member epoch: the assignment epoch this member has heard of; a share member takes its new partitions at its next heartbeat, nothing to revoke first";
const SPSO_HELP = "share-partition start offset (SPSO): every record below it is done with (acknowledged, archived, or deleted from the log)";
const SPEO_HELP = "share-partition end offset (SPEO): from here on the group has handed out nothing yet";
const CLIENTS_HELP = "who is connected to each broker now, by principal (the user a connection signed in as: SASL/SCRAM, or User:ANONYMOUS without security); client ids and software are what the clients say of themselves";
const INTER_BROKER_HELP = "the brokers' own connections to this broker (replication, transaction markers, share state), as the inter-broker user";
const SOFTWARE_HELP = "client software name and version, as the client reports them in ApiVersions (KIP-511)";
const RECORD_STATE_HELP = {
  available: "available: waiting to be delivered (again)",
  acquired: "acquired: delivered to one member, locked until its deadline; if the lock runs out or the member leaves, it comes back",
  acknowledged: "acknowledged: accepted by the member, done",
  archived: "archived: rejected, or delivered as often as the delivery limit allows; never delivered again",
};
let viewCount = 0; // per page: each view's SVG pattern ids are its own

// A kernel patch applied to a snapshot (delta.py: apply); returns the new value.
function applyPatch(old, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  if (Object.prototype.hasOwnProperty.call(patch, PATCH_NEW)) return patch[PATCH_NEW];
  if (Array.isArray(old)) {
    const result = old.slice();
    for (const [index, sub] of Object.entries(patch)) result[Number(index)] = applyPatch(result[Number(index)], sub);
    return result;
  }
  const result = { ...(old || {}) };
  for (const key of patch[PATCH_DELETE] || []) delete result[key];
  for (const [key, sub] of Object.entries(patch)) {
    if (key !== PATCH_DELETE) result[key] = applyPatch(result[key], sub);
  }
  return result;
}

// zlib-compressed JSON (a DataView of the comm's binary buffer) as a value; null when empty.
async function inflate(data) {
  if (!data || !data.byteLength) return null;
  const bytes = new Uint8Array(data.buffer || data, data.byteOffset || 0, data.byteLength);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
}

function seconds(ms) {
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
}

// -- building DOM and SVG as text ------------------------------------------------------------

function add(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function set(node, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.setAttribute("class", value);
    else if (key === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = v;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  return node;
}

function h(tag, props, ...children) {
  return add(set(document.createElement(tag), props), children);
}

function s(tag, props, ...children) {
  return add(set(document.createElementNS(SVG_NS, tag), props), children);
}

function tip(text) {
  return s("title", {}, text); // an SVG tooltip, as a text node
}

function clock(ms) {
  const d = new Date(ms);
  return `${d.toTimeString().slice(0, 8)}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

function epochColour(epoch) {
  const index = ((Number(epoch) % EPOCH_COLOURS) + EPOCH_COLOURS) % EPOCH_COLOURS;
  return `var(--pylog-epoch-${Number.isFinite(index) ? index : 0})`;
}

function shownState(broker) {
  return broker.state === "up" && broker.fenced ? "fenced" : broker.state;
}

function stateText(broker) {
  const state = shownState(broker);
  return broker.fenced && state !== "fenced" ? `${state} · fenced` : state;
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

// Replicas of a partition in assignment order, then any the assignment does not name.
function replicaIds(p) {
  const ids = Object.keys(p.replicas).map(Number);
  const order = [...p.assigned, ...ids.filter((id) => !p.assigned.includes(id)).sort((a, b) => a - b)];
  return [...new Set(order)];
}

// The role as the view states it: the controller's leader is the one leader; any other replica
// acting as leader only claims to, at the epoch it is stuck on (never a second leader).
function roleText(p, id, r) {
  if (r.last_known) return `was ${r.role}`; // the broker does not answer: what it last said
  const current = p.leader_epoch;
  if (r.role === "leader" && id === p.leader && r.leader_epoch === current) return "leader";
  if (r.role === "leader") {
    const ahead = current !== null && r.leader_epoch > current;
    return `claims leader (${ahead ? "ahead at" : "stale"} epoch ${r.leader_epoch})`;
  }
  return r.role;
}

// A controller's role as the view states it: the active one is the only active one; a
// leadership claim at an older epoch than any controller reports is stale, never a second.
function controllerRoleText(c, isActive) {
  if (c.role === null || c.role === undefined) return "no answer yet";
  const epoch = `epoch ${c.epoch}`;
  if (c.last_known) return `was ${c.role}${c.stale ? ` (stale ${epoch})` : ` · ${epoch}`}`;
  if (isActive) return `active leader · ${epoch}`;
  if (c.role === "leader" && c.stale) return `claims leader (stale ${epoch})`;
  if (c.role === "leader") return `leader · ${epoch}, not yet active`;
  if (c.role === "follower" && c.leader_id !== null) return `follower of ${c.leader_id} · ${epoch}`;
  return `${c.role} · ${epoch}`;
}

// Its metadata log: the committed offset (HW) it knows, what it holds above it, and its lag as
// the active controller reports it.
function controllerNumbers(c) {
  if (c.high_watermark === null || c.high_watermark === undefined) return "";
  const above = c.log_end_offset - c.high_watermark;
  const lag = c.lag === null || c.lag === undefined ? "lag ?" : `lag ${c.lag}`;
  return `committed ${c.high_watermark}${above > 0 ? ` (+${above})` : ""} · ${lag}`;
}

// -- the view --------------------------------------------------------------------------------

// What a partition's overview cell says: offline, under-replicated, disagreeing, or fine.
function health(p) {
  if (p.leader < 0) return "offline";
  if (p.isr.length < p.assigned.length) return "under";
  if (Object.values(p.replicas).some((r) => r.disagreement)) return "disagree";
  return "ok";
}

// "0-9, 12" -> a test for partition numbers; "" -> null (all); anything else -> undefined.
function partitionTest(text) {
  const parts = text.split(",").map((part) => part.trim()).filter(Boolean);
  if (!parts.length) return null;
  const ranges = [];
  for (const part of parts) {
    const m = /^(\d+)(?:\s*-\s*(\d+))?$/.exec(part);
    if (!m) return undefined;
    ranges.push([Number(m[1]), Number(m[2] ?? m[1])]);
  }
  return (n) => ranges.some(([a, b]) => n >= a && n <= b);
}

function perSecond(value, unit) {
  if (value === null || value === undefined) return "?";
  if (unit === "B") {
    if (value >= 1e6) return `${(value / 1e6).toFixed(1)} MB/s`;
    if (value >= 1e3) return `${(value / 1e3).toFixed(1)} KB/s`;
    return `${value} B/s`;
  }
  return `${value.toLocaleString("en")} ${unit}/s`;
}

function render({ model, el }) {
  const page = { selected: null, pending: new Map(), sent: 0, uid: `pylog-${++viewCount}-${Date.now()}` };
  // What the user chose to look at: a topic ("" all), partition numbers, only the troubled.
  const focus = { topic: "", test: null, attention: false, first: 0 };
  // The live state: base + delta (see the top of this file), and the chart points seen.
  const live = { key: "", snapshot: {}, series: [], base: {}, delta: {}, baseZ: null, deltaZ: null };
  async function inflateTraits() {
    const baseZ = model.get("base_z"), deltaZ = model.get("delta_z");
    if (baseZ !== live.baseZ) live.base = (await inflate(baseZ)) || {};
    if (deltaZ !== live.deltaZ) live.delta = (await inflate(deltaZ)) || {};
    live.baseZ = baseZ;
    live.deltaZ = deltaZ;
  }
  function refreshLive() {
    const base = live.base;
    const delta = live.delta;
    const key = `${base.seq}:${delta.seq}`;
    if (key === live.key) return;
    live.key = key;
    live.snapshot = delta.base_seq === base.seq ? applyPatch(base.snapshot || {}, delta.patch || {})
      : base.snapshot || {};
    const lastSeq = (points) => (points.length ? points[points.length - 1].seq : -1);
    const kept = base.series || [];
    if (lastSeq(kept) >= lastSeq(live.series)) live.series = kept.slice(); // the kernel's history
    if (delta.point && delta.point.seq > lastSeq(live.series)) live.series.push(delta.point);
    live.series = live.series.slice(-SERIES_POINTS_MAX);
  }
  Object.defineProperty(live, "timeline", { get: () => model.get("timeline") || {} });
  Object.defineProperty(live, "marks", { get: () => model.get("marks") || [] });
  const root = h("div", { class: "pylog-view" });
  const parts = {
    head: h("div", { class: "pylog-head" }),
    topology: h("div", { class: "pylog-topology" }),
    actions: h("div", { class: "pylog-actions" }),
    focus: h("div", { class: "pylog-focus" }),
    partitions: h("div", { class: "pylog-partitions" }),
    traffic: h("div", { class: "pylog-traffic" }),
    groups: h("div", { class: "pylog-groups" }),
    shares: h("div", { class: "pylog-shares" }),
    clients: h("div", { class: "pylog-clients" }),
    timeline: h("div", { class: "pylog-timeline" }),
    legend: legend(page.uid),
  };
  add(root, [
    hatchPattern(page.uid),
    parts.head,
    h("div", { class: "pylog-top" }, parts.topology, parts.actions),
    // Right under the brokers: scrub the timeline and watch them change.
    section("Timeline", parts.timeline, "pylog-section-timeline"),
    section("Partitions", h("div", {}, parts.focus, parts.partitions), "pylog-section-partitions"),
    section("Traffic", parts.traffic, "pylog-section-traffic"),
    section("Consumer groups", parts.groups, "pylog-section-groups"),
    section("Share groups", parts.shares, "pylog-section-shares"),
    section("Clients", parts.clients, "pylog-section-clients"),
    parts.legend,
  ]);
  el.append(root);

  const replay = () => model.get("replay") || {};
  const replaying = () => Boolean(replay().snapshot);
  const shown = () => (replaying() ? replay().snapshot : live.snapshot) || {};
  const shownMs = () => (replaying() ? replay().taken_ms : live.timeline.last_ms) || Date.now();

  function send(message) {
    model.send(message);
  }

  // kind: "broker" or "controller"; the message names it as broker_id or controller_id.
  function act(kind, nodeId, action) {
    const id = `js-${Date.now()}-${++page.sent}`;
    page.pending.set(id, { action, kind, id: nodeId, state: "sent" });
    send({ type: "act", id, action, [`${kind}_id`]: nodeId });
    drawTopology();
    drawActions();
  }

  function pendingFor(kind, nodeId) {
    return [...page.pending.values()].filter((a) => a.kind === kind && a.id === nodeId);
  }

  function toggleSelected(key) {
    page.selected = page.selected === key ? null : key;
    drawTopology();
    drawActions();
  }

  function showSeq(seq) {
    const timeline = live.timeline;
    if (seq >= timeline.last_seq) send({ type: "live" });
    else send({ type: "replay", seq: Math.max(seq, timeline.first_seq) });
  }

  // -- head: what is shown, and whether it is the present ------------------------------------

  function drawHead() {
    const snap = shown();
    const brokers = snap.brokers || [];
    const topics = new Set((snap.partitions || []).map((p) => p.topic));
    const controllers = snap.controllers || [];
    const active = snap.active_controller;
    const quorum = !controllers.length ? "" : ` · ${plural(controllers.length, "controller")}` +
      (active ? ` (active: controller ${active.controller_id}, epoch ${active.epoch})` : "");
    const lines = [
      h("div", { class: "pylog-title" },
        h("b", {}, "Cluster"), ` · ${plural(brokers.length, "broker")}${quorum} · ${plural(topics.size, "topic")}`),
    ];
    const status = model.get("status");
    if (status) lines.push(h("div", { class: "pylog-error" }, `⚠ ${status}`));
    if (live.error) lines.push(h("div", { class: "pylog-error" }, `⚠ cannot read the kernel's update: ${live.error}`));
    if (page.kernel === "silent") lines.push(h("div", { class: "pylog-warning pylog-no-kernel" }, NO_KERNEL_TEXT));
    if (controllers.length && !active) {
      lines.push(h("div", { class: "pylog-warning pylog-no-active" },
        "⚠ no controller is active (an election, or no majority answers): brokers keep the metadata they have"));
    }
    if (snap.authority === "newest claim") {
      lines.push(h("div", { class: "pylog-warning" },
        "⚠ the controller does not answer: leader, epoch and ISR are the newest any broker claims"));
    }
    if (replaying()) {
      const timeline = live.timeline;
      const behind = Math.round((timeline.last_ms - replay().taken_ms) / 1000);
      lines.push(h("div", { class: "pylog-replaying" }, rewindIcon(),
        ` Replaying the cluster as it was at ${clock(replay().taken_ms)} ` +
        `(snapshot ${replay().seq}, ${behind} s before the newest). Faults are off while replaying. `,
        h("button", { class: "pylog-live", onclick: () => send({ type: "live" }) }, "Back to live")));
    }
    parts.head.replaceChildren(...lines);
  }

  // -- topology: the controllers (the metadata quorum), the brokers, their links -------------

  function drawTopology() {
    const snap = shown();
    const brokers = snap.brokers || [];
    const controllers = snap.controllers || [];
    const active = snap.active_controller || null;
    const quorum = controllers.length > 0;
    const width = Math.max(3 * NODE_GAP, brokers.length * NODE_GAP, controllers.length * CTRL_GAP);
    const brokerY = quorum ? BROKER_Y_QUORUM : 100;
    const svg = s("svg", { class: "pylog-topology-svg", viewBox: `0 0 ${width} ${brokerY + NODE_R + 42}`,
      role: "group", "aria-label": quorum ? "controllers and brokers" : "brokers" });
    const leads = {};
    for (const p of snap.partitions || []) leads[p.leader] = (leads[p.leader] || 0) + 1;
    const xs = brokers.map((_, i) => (i + 0.5) * (width / Math.max(1, brokers.length)));
    if (quorum) {
      const cxs = controllers.map((_, i) => (i + 0.5) * (width / controllers.length));
      svg.append(s("g", { class: "pylog-quorum" },
        s("rect", { class: "pylog-quorum-frame", x: 2, y: 2, width: width - 4, height: QUORUM_FOOT - 2, rx: 10 }),
        s("text", { class: "pylog-quorum-label", x: 10, y: 15 }, "metadata quorum (Raft)"),
        tip("the controllers elect one of themselves by Raft; the leader, once its epoch has begun, is the " +
          "active controller: it decides leaders, epochs and ISRs, and the brokers follow it")));
      const at = controllers.findIndex((c) => active && c.controller_id === active.controller_id);
      if (at >= 0) {
        brokers.forEach((b, i) => svg.append(link({ x: cxs[at], y: QUORUM_FOOT - 16 }, { x: xs[i], y: brokerY }, shownState(b))));
      } else {
        svg.append(s("text", { x: width / 2, y: QUORUM_FOOT + 24, "text-anchor": "middle", class: "pylog-no-active-text" },
          "no active controller: brokers keep the metadata they have"));
      }
      controllers.forEach((c, i) => svg.append(controllerNode(c, cxs[i], active)));
    } else {
      svg.append(s("text", { x: width / 2, y: 31, "text-anchor": "middle",
        class: "pylog-dim" }, "one broker: no controller process"));
    }
    brokers.forEach((b, i) => svg.append(node(b, xs[i], brokerY, leads[b.broker_id] || 0)));
    parts.topology.replaceChildren(svg);
  }

  function controllerNode(c, x, active) {
    const id = c.controller_id;
    const key = `controller:${id}`;
    const isActive = Boolean(active && active.controller_id === id);
    const pending = pendingFor("controller", id);
    const classes = ["pylog-ctrl", `state-${c.state}`];
    if (isActive) classes.push("active");
    if (c.last_known) classes.push("last-known");
    if (c.stale) classes.push("stale");
    if (page.selected === key) classes.push("selected");
    if (pending.length) classes.push("pending");
    const role = controllerRoleText(c, isActive);
    const y = CTRL_Y;
    const g = s("g", { class: classes.join(" "),
      data: { controller: String(id), state: c.state, role: c.role || "", active: String(isActive),
        stale: String(Boolean(c.stale)), lastKnown: String(Boolean(c.last_known)) },
      role: "button", tabindex: 0, "aria-label": `controller ${id}, ${c.state}, ${role}`,
      onclick: () => toggleSelected(key),
      onkeydown: (event) => { if (event.key === "Enter" || event.key === " ") toggleSelected(key); } });
    const box = (pad, cls) => s("rect", { class: cls, x: x - CTRL_W / 2 - pad, y: y - CTRL_H / 2 - pad,
      width: CTRL_W + 2 * pad, height: CTRL_H + 2 * pad, rx: 8 + pad });
    if (pending.length) g.append(box(8, "pylog-pending-ring"));
    if (isActive) g.append(box(4, "pylog-ctrl-active-ring"));
    const stateLine = pending.length ? `${pending.map((a) => a.action).join(", ")}: pending…`
      : `${c.state}${c.last_known ? " · last known" : ""}`;
    const line = (dy, cls, text) => s("text", { x, y: y + dy, "text-anchor": "middle", class: `pylog-ctrl-line ${cls}` }, text);
    const lag = c.lag === null || c.lag === undefined ? "lag unknown (no active controller, or it has not heard from this one in its epoch)"
      : `${c.lag} records behind the active controller's log end, as it reports`;
    g.append(box(0, "pylog-ctrl-box"),
      s("text", { x, y: y + 5, "text-anchor": "middle", class: "pylog-ctrl-id" }, `${isActive ? "★ " : ""}controller ${id}`),
      line(30, "pylog-ctrl-role", `${c.stale ? "⚠ " : ""}${role}`),
      line(44, "pylog-ctrl-nums", controllerNumbers(c)),
      line(58, "pylog-ctrl-state", stateLine),
      tip(`controller ${id}: ${CONTROLLER_STATE_HELP[c.state] || c.state}. ` +
        (c.role === null || c.role === undefined ? "It has not answered yet. "
          : `${c.last_known ? "When last heard: " : ""}${role}; leader it knows: ${c.leader_id ?? "none"}; ` +
          `metadata log committed to ${c.high_watermark} (HW), written to ${c.log_end_offset} (LEO); ${lag}. `) +
        "Click for kill, pause, isolate…"));
    return g;
  }

  function link(from, to, state) {
    const g = s("g", { class: `pylog-link link-${state}` });
    const top = { x: to.x, y: to.y - NODE_R };
    const bottom = { x: from.x, y: from.y + 16 };
    if (state === "isolated") { // drawn cut: two halves and a ✕
      const mid = { x: (top.x + bottom.x) / 2, y: (top.y + bottom.y) / 2 };
      const gap = 0.14;
      const at = (t) => ({ x: bottom.x + (top.x - bottom.x) * t, y: bottom.y + (top.y - bottom.y) * t });
      const a = at(0.5 - gap), c = at(0.5 + gap);
      g.append(s("line", { x1: bottom.x, y1: bottom.y, x2: a.x, y2: a.y }),
        s("line", { x1: c.x, y1: c.y, x2: top.x, y2: top.y }),
        s("text", { x: mid.x, y: mid.y + 5, "text-anchor": "middle", class: "pylog-cut" }, "✕"),
        tip("isolated: no traffic with the controller or the other brokers"));
    } else {
      g.append(s("line", { x1: bottom.x, y1: bottom.y, x2: top.x, y2: top.y }));
    }
    return g;
  }

  function node(broker, x, y, leading) {
    const id = broker.broker_id;
    const state = shownState(broker);
    const pending = pendingFor("broker", id);
    const classes = ["pylog-node", `state-${state}`];
    if (page.selected === `broker:${id}`) classes.push("selected");
    if (pending.length) classes.push("pending");
    const select = () => toggleSelected(`broker:${id}`);
    const g = s("g", { class: classes.join(" "), data: { broker: String(id), state },
      role: "button", tabindex: 0, "aria-label": `broker ${id}, ${stateText(broker)}`,
      onclick: select,
      onkeydown: (event) => { if (event.key === "Enter" || event.key === " ") select(); } });
    if (pending.length) g.append(s("circle", { class: "pylog-pending-ring", cx: x, cy: y, r: NODE_R + 7 }));
    g.append(
      s("circle", { class: "pylog-node-circle", cx: x, cy: y, r: NODE_R }),
      s("text", { x, y: y + 6, "text-anchor": "middle", class: "pylog-node-id" }, String(id)),
      s("text", { x, y: y + NODE_R + 17, "text-anchor": "middle", class: "pylog-node-label" },
        `broker ${id} · ${stateText(broker)}`),
      s("text", { x, y: y + NODE_R + 33, "text-anchor": "middle", class: "pylog-node-sub" },
        pending.length ? `${pending.map((a) => a.action).join(", ")}: pending…`
          : `leads ${plural(leading, "partition")}`),
      tip(`broker ${id}: ${STATE_HELP[state] || state}. Click for kill, pause, isolate…`));
    return g;
  }

  // -- actions: the selected broker's or controller's faults and the outcome of the last one --

  // The selected node as {kind, id, title}, or null (nothing selected, or no longer shown).
  function selectedNode(snap) {
    const [kind, text] = (page.selected || ":").split(":");
    const id = Number(text);
    if (kind === "broker") {
      const broker = (snap.brokers || []).find((b) => b.broker_id === id);
      return broker ? { kind, id, title: stateText(broker) } : null;
    }
    if (kind === "controller") {
      const c = (snap.controllers || []).find((entry) => entry.controller_id === id);
      const isActive = Boolean(snap.active_controller && snap.active_controller.controller_id === id);
      return c ? { kind, id, title: `${c.state} · ${controllerRoleText(c, isActive)}` } : null;
    }
    return null;
  }

  function drawActions() {
    const snap = shown();
    const rows = [];
    const chosen = selectedNode(snap);
    if (!chosen) {
      rows.push(h("div", { class: "pylog-hint" }, (snap.controllers || []).length
        ? "Click a broker or a controller to kill, restart, pause, resume, isolate or heal it."
        : "Click a broker to kill, restart, pause, resume, isolate or heal it."));
    } else {
      const help = model.get(chosen.kind === "controller" ? "controller_action_help" : "action_help") || {};
      rows.push(h("div", { class: "pylog-actions-title" },
        h("b", {}, `${chosen.kind} ${chosen.id}`), ` · ${chosen.title}`));
      const buttons = Object.keys(help).map((action) => h("button", {
        class: "pylog-action", data: { action, kind: chosen.kind }, title: help[action],
        disabled: replaying(), onclick: () => act(chosen.kind, chosen.id, action),
      }, action));
      rows.push(h("div", { class: "pylog-buttons" }, buttons));
      if (replaying()) rows.push(h("div", { class: "pylog-hint" }, "Back to live to act."));
    }
    rows.push(actionStatus());
    parts.actions.replaceChildren(...rows);
  }

  function actionStatus() {
    const lines = [];
    for (const a of page.pending.values()) {
      lines.push(h("div", { class: `pylog-status status-${a.state}` }, a.state === "sent"
        ? `${a.action} ${a.kind} ${a.id}: pending, sent to the kernel (it acts when no cell is running)`
        : `${a.action} ${a.kind} ${a.id}: running…`));
    }
    const last = model.get("action") || {};
    if (last.text && !page.pending.has(last.id)) {
      const mark = { done: "✓", refused: "✕", failed: "⚠" }[last.state] || "";
      lines.push(h("div", { class: `pylog-status status-${last.state}` }, `${mark} ${last.text}`));
    }
    return h("div", { class: "pylog-status-lines", "aria-live": "polite" }, lines);
  }

  function onAction() {
    const last = model.get("action") || {};
    const mine = page.pending.get(last.id);
    if (mine && last.state === "running") mine.state = "running";
    else if (mine) page.pending.delete(last.id);
    drawTopology();
    drawActions();
  }

  // -- partitions: every replica's log on its topic's offset axis -----------------------------

  // -- focus: which partitions are drawn (built once, so typing in it is never interrupted) --

  const topicSelect = h("select", { class: "pylog-focus-topic", "aria-label": "topic shown" });
  const partitionBox = h("input", { type: "text", class: "pylog-focus-partitions", size: 12,
    placeholder: "all, or 0-9, 12", "aria-label": "partitions shown" });
  const attentionBox = h("input", { type: "checkbox", class: "pylog-focus-attention" });
  const internalBox = h("input", { type: "checkbox", class: "pylog-internal" });
  const foldNote = h("span", {});
  function refocus(change) {
    Object.assign(focus, change, { first: 0 });
    drawPartitions();
    drawEvents();
  }
  topicSelect.addEventListener("change", () => refocus({ topic: topicSelect.value }));
  partitionBox.addEventListener("input", () => {
    const test = partitionTest(partitionBox.value);
    partitionBox.classList.toggle("invalid", test === undefined);
    partitionBox.title = test === undefined ? "partition numbers or ranges, comma-separated: 0-9, 12" : "";
    if (test !== undefined) refocus({ test });
  });
  attentionBox.addEventListener("change", () => refocus({ attention: attentionBox.checked }));
  internalBox.addEventListener("change", () => { model.set("show_internal", internalBox.checked); model.save_changes(); });
  add(parts.focus, [
    h("label", {}, "topic ", topicSelect),
    h("label", {}, "partitions ", partitionBox),
    h("label", { title: "offline, under-replicated, a broker disagreeing with the controller, or a recent truncation" },
      attentionBox, " only those needing attention"),
    h("label", { class: "pylog-fold" }, internalBox, " show internal topics", foldNote),
  ]);

  function drawFocus(snap) {
    const topics = [...new Set((snap.partitions || []).map((p) => p.topic))];
    if (focus.topic && !topics.includes(focus.topic)) focus.topic = "";
    const options = [["", `all ${plural(topics.length, "topic")}`], ...topics.map((topic) => [topic, topic])];
    const current = [...topicSelect.options].map((o) => [o.value, o.textContent]);
    if (JSON.stringify(current) !== JSON.stringify(options)) {
      topicSelect.replaceChildren(...options.map(([value, label]) => h("option", { value }, label)));
    }
    topicSelect.value = focus.topic;
    internalBox.checked = Boolean(model.get("show_internal"));
    const folded = Object.entries(snap.folded || {});
    foldNote.textContent = folded.length && !internalBox.checked
      ? ` (${folded.map(([topic, n]) => `${topic}: ${n} partitions`).join(", ")} folded)` : "";
  }

  function needsAttention(p) {
    return health(p) !== "ok" || Object.values(p.replicas).some((r) => (r.truncated || []).length);
  }

  // -- partitions: a grid of all in focus, then every replica's log of a page of them ---------

  function drawPartitions() {
    const snap = shown();
    drawFocus(snap);
    const states = Object.fromEntries((snap.brokers || []).map((b) => [b.broker_id, b]));
    const all = snap.partitions || [];
    const chosen = all.filter((p) => (!focus.topic || p.topic === focus.topic)
      && (!focus.test || focus.test(p.partition)) && (!focus.attention || needsAttention(p)));
    focus.first = Math.min(focus.first, Math.max(0, chosen.length - 1));
    const detailed = chosen.slice(focus.first, focus.first + PAGE_PARTITIONS);
    const blocks = [];
    if (chosen.length >= OVERVIEW_PARTITIONS_MIN) blocks.push(overview(chosen));
    if (chosen.length > PAGE_PARTITIONS) blocks.push(pager(chosen.length));
    const byTopic = new Map();
    for (const p of detailed) {
      if (!byTopic.has(p.topic)) byTopic.set(p.topic, []);
      byTopic.get(p.topic).push(p);
    }
    const count = (topic) => all.filter((p) => p.topic === topic).length;
    for (const [topic, partitions] of byTopic) {
      const axis = offsetAxis(partitions);
      blocks.push(h("div", { class: "pylog-topic", data: { topic, low: String(axis.low), high: String(axis.high) } },
        h("div", { class: "pylog-topic-name" }, topic,
          h("span", { class: "pylog-dim" }, ` · ${plural(count(topic), "partition")}`)),
        axisRow(axis),
        partitions.map((p) => partition(p, states, axis))));
    }
    if (!all.length) blocks.push(h("div", { class: "pylog-dim" }, "no topics yet"));
    else if (!chosen.length) blocks.push(h("div", { class: "pylog-dim" }, "no partition matches the focus"));
    const scroll = parts.partitions.querySelector(".pylog-scroll");
    const top = scroll ? scroll.scrollTop : 0;
    const list = h("div", { class: "pylog-scroll" }, blocks);
    parts.partitions.replaceChildren(list);
    list.scrollTop = top;
  }

  // One cell per partition, coloured by its health, the leader's id under its number.
  function overview(chosen) {
    const counts = {};
    for (const p of chosen) counts[health(p)] = (counts[health(p)] || 0) + 1;
    const summary = Object.keys(HEALTH_HELP).filter((k) => counts[k])
      .map((k) => `${counts[k]} ${{ ok: "in sync", under: "under-replicated", offline: "offline", disagree: "disagreeing" }[k]}`);
    const byTopic = new Map();
    for (const p of chosen) {
      if (!byTopic.has(p.topic)) byTopic.set(p.topic, []);
      byTopic.get(p.topic).push(p);
    }
    const cell = (p) => {
      const state = health(p);
      const name = `${p.topic}-${p.partition}`;
      const what = `${name}: leader ${p.leader >= 0 ? p.leader : "none"}, epoch ${p.leader_epoch ?? "?"}, ` +
        `ISR [${p.isr.join(", ")}] of replicas [${p.assigned.join(", ")}]: ${HEALTH_HELP[state]}. Click to show it alone.`;
      return h("button", { class: `pylog-cell health-${state}`, data: { partition: name, health: state }, title: what,
        onclick: () => {
          partitionBox.value = String(p.partition);
          partitionBox.classList.remove("invalid");
          refocus({ topic: p.topic, test: partitionTest(partitionBox.value) });
        } },
      h("span", { class: "pylog-cell-p" }, String(p.partition)),
      h("span", { class: "pylog-cell-l" }, p.leader >= 0 ? `★${p.leader}` : "✕"));
    };
    return h("div", { class: "pylog-overview" },
      h("div", { class: "pylog-overview-summary" }, `${plural(chosen.length, "partition")}: ${summary.join(", ")}`),
      [...byTopic].map(([topic, ps]) => h("div", { class: "pylog-grid-topic" },
        byTopic.size > 1 ? h("div", { class: "pylog-grid-name" }, topic) : null,
        h("div", { class: "pylog-grid" }, ps.map(cell)))));
  }

  function pager(total) {
    const first = focus.first, last = Math.min(total, first + PAGE_PARTITIONS);
    const go = (to) => { focus.first = to; drawPartitions(); };
    return h("div", { class: "pylog-pager" },
      h("button", { class: "pylog-prev", disabled: first === 0, onclick: () => go(Math.max(0, first - PAGE_PARTITIONS)) }, "◀ previous"),
      h("span", {}, ` in detail: ${first + 1}–${last} of ${total} `),
      h("button", { class: "pylog-next", disabled: last >= total, onclick: () => go(first + PAGE_PARTITIONS) }, "next ▶"));
  }

  // One offset axis for every replica bar of a topic's partitions on the page: the same origin
  // and the same pixels per offset whatever a row's labels say (they sit in fixed-width
  // columns), so a longer log is a longer bar and equal offsets line up.
  function offsetAxis(partitions) {
    const rs = partitions.flatMap((p) => Object.values(p.replicas));
    const lo = Math.min(...rs.map((r) => r.log_start_offset), Infinity);
    const low = Number.isFinite(lo) ? lo : 0;
    const removed = rs.flatMap((r) => (r.truncated || []).map((cut) => cut.from_offset));
    return { low, high: Math.max(low + 1, ...rs.map((r) => r.log_end_offset), ...removed) };
  }

  function axisRow(axis) {
    return h("div", { class: "pylog-replica pylog-offsets-row", "aria-hidden": "true" }, h("span", {}),
      h("span", { class: "pylog-dim", title: "every bar of this topic on one offset axis" }, "offset"),
      h("div", { class: "pylog-offsets" }, h("span", {}, String(axis.low)), h("span", {}, String(axis.high))),
      h("span", {}));
  }

  function partition(p, states, axis) {
    const ids = replicaIds(p);
    const rs = ids.map((id) => p.replicas[id]).filter(Boolean);
    const lo = Math.min(...rs.map((r) => r.log_start_offset), Infinity);
    const low = Number.isFinite(lo) ? lo : 0;
    const high = Math.max(low, ...rs.map((r) => r.log_end_offset));
    const leader = p.leader >= 0 ? `★ ${p.leader}` : "none";
    const name = `${p.topic}-${p.partition}`;
    const head = h("div", { class: "pylog-p-head" },
      h("span", { class: "pylog-p-name" }, name),
      h("span", {}, `leader ${leader}`),
      h("span", {}, "epoch ", epochChip(p.leader_epoch)),
      h("span", {}, `ISR [${p.isr.join(", ")}]`),
      h("span", { class: "pylog-dim" }, `offsets ${low} … ${high}`),
      partitionSpark(name));
    if (p.leader < 0) head.append(h("span", { class: "pylog-warning" }, "⚠ no leader: the partition is offline"));
    const rows = ids.map((id) => replicaRow(p, id, states[id], axis));
    const data = { partition: name, leader: String(p.leader), isr: p.isr.join(",") };
    return h("div", { class: "pylog-partition", data }, head, rows);
  }

  function epochChip(epoch) {
    if (epoch === null || epoch === undefined) return h("span", { class: "pylog-chip" }, "?");
    return h("span", { class: "pylog-chip", style: `background:${epochColour(epoch)}` }, String(epoch));
  }

  // A follower's lag as its leader measures it: records behind, and for how long (from the
  // leader's last-caught-up time, so an idle snapshot stays the same while the seconds count).
  function lagNote(p, id, r) {
    if (r.last_known && id !== p.leader) {
      return h("span", { class: "pylog-lag pylog-dim", title: "its broker does not answer: how far behind it is now is unknown; its bar ends where its log ended when last heard" },
        "lag unknown");
    }
    if (id === p.leader || r.lag_records === undefined) return null;
    if (r.lag_records === null) { // the leader has no fetch from it (it was elected since)
      return h("span", { class: "pylog-lag pylog-dim", title: "the leader has had no fetch from this replica since it was elected" },
        "lag ? (no fetch from this leader yet)");
    }
    if (r.lag_records === 0) return h("span", { class: "pylog-lag pylog-dim", title: "at the leader's log end offset" }, "caught up");
    const behind = r.behind_since_ms ? Math.max(0, shownMs() - r.behind_since_ms) : null;
    const text = `lag ${r.lag_records} records${behind === null ? "" : ` · behind ${seconds(behind)}`}`;
    return h("span", { class: "pylog-lag", title: behind === null ? "records behind the leader's LEO"
      : `records behind the leader's LEO; not caught up for ${behind} ms (as of this snapshot)` }, text);
  }

  // A silent broker's replica: what it is now (paused or down, since when), then its last claim.
  function silentLines(r, broker) {
    const state = broker ? broker.state : "unknown";
    const word = state === "paused" || state === "down" ? state : "no answer";
    const since = broker && broker.silent_since_ms ? ` since ${clock(broker.silent_since_ms).slice(0, 8)}` : "";
    return [`${word}${since}`, `last claimed ${r.role} at epoch ${r.leader_epoch}`];
  }

  // The role column: one or two lines, each cut with … past the column (the whole on hover).
  function roleCell(p, id, r, broker) {
    const lines = r.last_known ? silentLines(r, broker) : [roleText(p, id, r)];
    const line = (text, chip) => h("span", { class: "pylog-r-line" }, text, chip ? " " : "", chip);
    return h("span", { class: "pylog-r-role", title: lines.join("; ") },
      lines.map((text, i) => line(text, i === lines.length - 1 && !r.last_known ? epochChip(r.leader_epoch) : null)));
  }

  function replicaRow(p, id, broker, axis) {
    const r = p.replicas[id];
    const state = broker ? shownState(broker) : "unknown";
    const isLeader = id === p.leader;
    const inIsr = p.isr.includes(id);
    const classes = ["pylog-replica", isLeader ? "is-leader" : "", inIsr ? "in-isr" : "out-of-isr"];
    const label = h("span", { class: "pylog-r-id" }, isLeader ? `★ ${id}` : `${id}`);
    if (!r) {
      return h("div", { class: [...classes, "no-answer"].join(" "), data: { broker: String(id) } },
        label, h("span", { class: "pylog-r-role pylog-dim" }, h("span", { class: "pylog-r-line" }, `no answer yet (broker ${state})`)));
    }
    if (r.last_known) classes.push("last-known");
    const notes = [];
    if (!inIsr && p.assigned.includes(id)) notes.push(h("span", { class: "pylog-tag" }, "out of ISR"));
    if (r.last_known) notes.push(h("span", { class: "pylog-tag", title: "its broker does not answer: the numbers and the bar are what it last reported" }, "last known state"));
    if (r.compacted) {
      const cleaned = r.cleaned || [];
      const span = cleaned.reduce((total, [from, to]) => total + to - from, 0);
      const kept = cleaned.reduce((total, [, , records]) => total + records, 0);
      notes.push(h("span", { class: "pylog-tag" },
        `compacted · cleaned below ${r.first_dirty_offset}` +
        (span ? ` (${kept} of ${span} offsets still hold a record)` : "") + ` · ${r.size_bytes} B`));
    }
    for (const cut of r.truncated || []) {
      const ago = Math.max(0, Math.round((shownMs() - cut.now_ms) / 1000));
      notes.push(h("span", { class: "pylog-truncated-note" },
        `✂ truncated [${cut.to_offset}, ${cut.from_offset}) ${ago} s ago (${cut.reason})`));
    }
    if (r.open_transactions.length) notes.push(openTransactionsNote(r));
    if ((r.markers || []).length) notes.push(markersNote(r));
    if (r.disagreement) notes.push(h("span", { class: "pylog-disagreement" }, `⚠ ${r.disagreement}`));
    const data = { broker: String(id), hw: String(r.high_watermark), leo: String(r.log_end_offset) };
    return h("div", { class: classes.filter(Boolean).join(" "), data },
      label, roleCell(p, id, r, broker), bar(r, axis.low, axis.high, inIsr), numbersCell(p, id, r),
      notes.length ? h("div", { class: "pylog-r-notes" }, notes) : null);
  }

  // The numbers column: the offsets, then the lag; each line cut with … (the whole on hover).
  function numbersCell(p, id, r) {
    const uncommitted = r.log_end_offset - r.high_watermark;
    const offsets = h("span", { class: "pylog-r-line" },
      `HW ${r.high_watermark}`, lsoNote(r), ` · LEO ${r.log_end_offset}`,
      uncommitted > 0 && r.role === "leader" ? h("span", { class: "pylog-uncommitted" }, ` (+${uncommitted} uncommitted)`) : "",
      uncommitted > 0 && r.role !== "leader" ? h("span", { class: "pylog-uncommitted",
        title: "a follower learns the leader's HW with its next fetch; these may be committed already" },
      ` (+${uncommitted} above its HW)`) : "",
      r.log_start_offset > 0 ? h("span", { class: "pylog-dim" }, ` · starts at ${r.log_start_offset}`) : "");
    const lag = lagNote(p, id, r);
    const cell = h("span", { class: "pylog-r-nums" }, offsets, lag ? h("span", { class: "pylog-r-line" }, lag) : null);
    cell.title = cell.textContent;
    return cell;
  }

  // " · LSO n" where open transactions hold the last stable offset below the HW.
  function lsoNote(r) {
    if (!lsoBelowHw(r)) return "";
    return h("span", { class: "pylog-lso-text", title: LSO_HELP }, ` · LSO ${r.last_stable_offset}`);
  }

  function openTransactionsNote(r) {
    const count = r.open_transactions.length;
    const each = r.open_transactions.map(([producerId, first]) => `producer ${producerId} from offset ${first}`);
    return h("span", { class: "pylog-tag pylog-open-txns", title: `open (neither committed nor aborted): ${each.join("; ")}` },
      `${plural(count, "open transaction")}`);
  }

  // "markers 2 commit, 4 abort": the newest few of the marks on the bar.
  function markersNote(r) {
    const shown = r.markers.slice(-MARKERS_LISTED_MAX).map(([offset, kind]) =>
      h("span", { class: `pylog-marker-text ${markerClass(kind)}` }, `${offset} ${String(kind).toLowerCase()}`));
    const more = r.markers.length - shown.length;
    return h("span", { class: "pylog-tag pylog-markers", title: MARKER_HELP }, "markers ",
      shown.flatMap((node, i) => (i ? [", ", node] : [node])), more > 0 ? ` (and ${more} older)` : "");
  }

  // Offset ranges [from, to) and the leader epoch that wrote each, from the replica's
  // leader-epoch cache, clipped to its log; the replica's own epoch when the cache is empty.
  function epochRanges(r) {
    const entries = (r.epochs || []).filter(([, start]) => start < r.log_end_offset);
    if (!entries.length) return [[r.log_start_offset, r.log_end_offset, r.leader_epoch]];
    return entries.map(([epoch, start], i) => [
      Math.max(start, r.log_start_offset),
      i + 1 < entries.length ? entries[i + 1][1] : r.log_end_offset, epoch,
    ]).filter(([from, to]) => to > from);
  }

  function bar(r, low, high, inIsr) {
    const x = (offset) => ((offset - low) / (high - low)) * BAR_UNITS;
    const start = x(r.log_start_offset);
    const hwOffset = Math.max(r.high_watermark, r.log_start_offset);
    const hw = x(hwOffset);
    const end = x(r.log_end_offset);
    const at = x; // never stretched: equal offsets stay at equal x in every row
    const svg = s("svg", { class: "pylog-bar", viewBox: `0 0 ${BAR_UNITS} 16`, preserveAspectRatio: "none",
      role: "img", "aria-label": `log from ${r.log_start_offset} to ${r.log_end_offset}, HW ${r.high_watermark}` },
      s("rect", { class: "pylog-track", x: 0, y: 2, width: BAR_UNITS, height: 12 }));
    const ranges = epochRanges(r);
    ranges.forEach(([from, to, epoch], i) => {
      const colour = r.last_known ? "var(--pylog-stale)" : epochColour(epoch);
      const a = at(from), b = at(to), mid = at(Math.min(Math.max(hwOffset, from), to));
      const what = `epoch ${epoch}: offsets ${from} to ${to - 1}, written while the leader epoch was ${epoch}`;
      if (mid > a) svg.append(s("rect", { class: "pylog-committed", x: a, y: 2, width: mid - a, height: 12, style: `fill:${colour}`, data: { epoch: String(epoch) } }, tip(what)));
      if (b > mid) svg.append(s("rect", { class: "pylog-uncommitted-part", x: mid, y: 2, width: b - mid, height: 12, style: `fill:${colour}`, data: { epoch: String(epoch) } }, tip(`${what} (above the HW: not committed)`)));
      if (i > 0) svg.append(s("line", { class: "pylog-epoch-edge", x1: a, y1: 2, x2: a, y2: 14 }));
    });
    for (const [from, to, kept] of r.cleaned || []) { // compaction gaps, denser where more went
      const span = to - from;
      if (span <= 0 || kept >= span || to <= r.log_start_offset) continue;
      const a = x(Math.max(from, r.log_start_offset)), b = Math.max(x(to), a + 1);
      const removed = 1 - kept / span;
      svg.append(s("rect", { class: "pylog-compaction-gap", x: a, y: 2, width: b - a, height: 12,
        style: `fill:url(#${page.uid}-gaps);opacity:${(0.3 + 0.7 * removed).toFixed(2)}`,
        data: { from: String(from), to: String(to), kept: String(kept) } },
      tip(`compacted: offsets ${from} to ${to - 1} hold ${kept} of ${span} records; compaction removed ` +
        "the others (a newer record has the same key) and consumers skip the gaps")));
    }
    for (const [offset, kind, producerId] of r.markers || []) { // a tick mid-offset, haloed
      if (offset < r.log_start_offset || offset >= r.log_end_offset) continue;
      const mid = (at(offset) + at(offset + 1)) / 2;
      svg.append(s("g", { class: `pylog-marker ${markerClass(kind)}`,
        data: { offset: String(offset), type: String(kind), producer: String(producerId) } },
      s("line", { class: "pylog-marker-halo", x1: mid, y1: 1, x2: mid, y2: 16 }),
      s("line", { class: "pylog-marker-tick", x1: mid, y1: 1, x2: mid, y2: 16 }),
      tip(`${kind} marker at offset ${offset}, producer id ${producerId}: ${MARKER_HELP}`)));
    }
    if (end > start) {
      svg.append(s("rect", { class: `pylog-outline ${inIsr ? "" : "dashed"}`, x: start, y: 2, width: end - start, height: 12 }));
      svg.append(s("line", { class: "pylog-hw-tick", x1: hw, y1: 0, x2: hw, y2: 16 }));
    }
    for (const [producerId, first] of r.open_transactions) { // a band over what each holds back
      const a = at(Math.max(first, r.log_start_offset));
      svg.append(s("rect", { class: "pylog-open-txn", x: a, y: 0, width: Math.max(end - a, 2), height: 2,
        data: { producer: String(producerId), first: String(first) } },
      tip(`open transaction of producer ${producerId}, from offset ${first}: its records, and every record after, are held back from read_committed consumers until its commit or abort marker is written`)));
    }
    if (lsoBelowHw(r)) {
      const lso = x(Math.max(r.last_stable_offset, r.log_start_offset));
      svg.append(s("line", { class: "pylog-lso", x1: lso, y1: 0, x2: lso, y2: 16, data: { offset: String(r.last_stable_offset) } },
        tip(`LSO ${r.last_stable_offset}: ${LSO_HELP}`)));
    }
    for (const cut of r.truncated || []) {
      const a = x(cut.to_offset), b = Math.max(x(cut.from_offset), a + 2);
      svg.append(s("rect", { class: "pylog-truncated", x: a, y: 1, width: b - a, height: 14,
        style: `fill:url(#${page.uid}-hatch)` },
      tip(`truncated: offsets ${cut.to_offset} to ${cut.from_offset - 1} removed at ${clock(cut.now_ms)} (${cut.reason})`)));
    }
    svg.append(tip(`offsets ${r.log_start_offset} to ${r.log_end_offset}: committed below HW ${r.high_watermark}` +
      (lsoBelowHw(r) ? `; read_committed consumers read below LSO ${r.last_stable_offset}` : "")));
    return svg;
  }

  // -- charts: sparklines over the recorded snapshots -----------------------------------------

  // Values over time as a polyline, flat from the last point to the shown moment.
  function sparkline(points, className, label) {
    const shownAt = shownMs();
    const kept = points.filter((pt) => pt.t <= shownAt);
    if (kept.length < 1) return null;
    const t0 = kept[0].t, t1 = Math.max(shownAt, t0 + 1000);
    const lines = kept[0].values.map((_, k) => kept.map((pt) => pt.values[k]));
    const top = Math.max(1, ...lines.flat().filter((v) => v !== null));
    const bottom = Math.min(...lines.flat().filter((v) => v !== null), top);
    const span = Math.max(1, top - bottom);
    const xs = (ms) => ((ms - t0) / (t1 - t0)) * SPARK_W;
    const ys = (v) => SPARK_H - 2 - ((v - bottom) / span) * (SPARK_H - 4);
    const svg = s("svg", { class: `pylog-spark ${className}`, viewBox: `0 0 ${SPARK_W} ${SPARK_H}`,
      preserveAspectRatio: "none", role: "img", "aria-label": label });
    lines.forEach((values, k) => {
      const coords = kept.map((pt, i) => `${xs(pt.t).toFixed(1)},${ys(values[i]).toFixed(1)}`);
      coords.push(`${SPARK_W},${ys(values[values.length - 1]).toFixed(1)}`);
      svg.append(s("polyline", { class: `pylog-spark-line line-${k}`, points: coords.join(" ") }));
    });
    svg.append(tip(label));
    return svg;
  }

  function seriesUpTo() {
    const seq = replaying() ? replay().seq : Infinity;
    return live.series.filter((pt) => pt.seq <= seq);
  }

  function rate(points, k) { // per second, over the points drawn
    if (points.length < 2) return null;
    const a = points[0], b = points[points.length - 1];
    const seconds = (b.t - a.t) / 1000;
    return seconds > 0 ? (b.values[k] - a.values[k]) / seconds : null;
  }

  function partitionSpark(name) {
    const points = seriesUpTo().filter((pt) => pt.partitions && pt.partitions[name])
      .map((pt) => ({ t: pt.taken_ms, values: pt.partitions[name] }));
    if (points.length < 2) return null;
    const perSecond = rate(points, 1);
    const label = `HW (solid) and LEO (dashed) of ${name} over the last ${plural(points.length, "change")}` +
      (perSecond === null ? "" : `; on average ${Math.round(perSecond)} records/s written over that span`);
    return h("span", { class: "pylog-chart", title: label }, sparkline(points, "spark-offsets", label),
      perSecond === null ? null : h("span", { class: "pylog-dim" }, ` avg ${Math.round(perSecond)} rec/s`));
  }

  function groupSpark(group) {
    const points = seriesUpTo().filter((pt) => pt.groups && typeof pt.groups[group] === "number") // unknown: left out
      .map((pt) => ({ t: pt.taken_ms, values: [pt.groups[group]] }));
    if (points.length < 2) return null;
    return sparkline(points, "spark-lag", `total lag of group ${group} over the last ${plural(points.length, "change")}`);
  }

  // -- traffic: each broker's rates, which the kernel measures between two snapshots ---------

  function drawTraffic() {
    const brokers = shown().brokers || [];
    const cells = (b) => {
      const r = b.rates;
      const answering = b.state === "up" || b.state === "isolated";
      const value = (key, unit) => (answering ? perSecond(r ? r[key] : null, unit) : "—");
      return [value("messages_in_per_s", "records"), value("bytes_in_per_s", "B"),
        value("bytes_out_per_s", "B"), value("replication_bytes_out_per_s", "B")]
        .map((text) => h("td", { class: "pylog-num" }, text));
    };
    const rows = brokers.map((b) => h("tr", { data: { broker: String(b.broker_id) } },
      h("td", {}, `broker ${b.broker_id}`), cells(b), h("td", {}, trafficSparks(b.broker_id))));
    const known = brokers.filter((b) => b.rates);
    const sum = (key) => known.reduce((total, b) => total + b.rates[key], 0);
    if (known.length > 1) {
      rows.push(h("tr", { class: "pylog-total" }, h("td", {}, "cluster"),
        [["messages_in_per_s", "records"], ["bytes_in_per_s", "B"], ["bytes_out_per_s", "B"],
          ["replication_bytes_out_per_s", "B"]].map(([key, unit]) => h("td", { class: "pylog-num" }, perSecond(sum(key), unit))),
        h("td", {})));
    }
    const heads = [["broker", ""], ["records in", "records appended as leader, from producers (Kafka: MessagesInPerSec)"],
      ["bytes in", "bytes of those appends (BytesInPerSec)"],
      ["fetched by consumers", "record bytes served to consumers (BytesOutPerSec)"],
      ["fetched by followers", "record bytes served to follower replicas: the cost of replication (ReplicationBytesOutPerSec)"],
      ["over time", "records in per second; bytes fetched per second by consumers (solid) and followers (dashed)"]];
    parts.traffic.replaceChildren(h("table", { class: "pylog-table" },
      h("thead", {}, h("tr", {}, heads.map(([text, title]) => h("th", { title }, text)))),
      h("tbody", {}, rows)));
  }

  function trafficSparks(id) {
    const points = seriesUpTo().filter((pt) => pt.brokers && pt.brokers[id]);
    if (points.length < 2) return null;
    const over = (keys) => points.map((pt) => ({ t: pt.taken_ms, values: keys.map((k) => pt.brokers[id][k]) }));
    return h("span", {},
      sparkline(over(["messages_in_per_s"]), "spark-in", `records in per second at broker ${id}`), " ",
      sparkline(over(["bytes_out_per_s", "replication_bytes_out_per_s"]), "spark-out",
        `bytes fetched per second from broker ${id}: by consumers (solid), by followers (dashed)`));
  }

  // -- consumer groups ------------------------------------------------------------------------

  // Classic groups (JoinGroup/SyncGroup) in one table; each consumer-protocol group (KIP-848)
  // in a panel of its own: its epochs, and each member's epoch and partitions.
  function drawGroups() {
    drawShareGroups();
    const groups = (shown().groups || []).filter((g) => g.group_type !== SHARE_GROUP);
    if (!groups.length) {
      parts.groups.replaceChildren(h("div", { class: "pylog-dim" }, "no consumer groups"));
      return;
    }
    const classic = groups.filter((g) => g.group_type !== CONSUMER_GROUP);
    const panels = groups.filter((g) => g.group_type === CONSUMER_GROUP).map(consumerGroupPanel);
    parts.groups.replaceChildren(...(classic.length ? [classicGroups(classic)] : []), ...panels);
  }

  function classicGroups(groups) {
    const cells = (...values) => values.map((v) => h("td", {}, v));
    const rows = groups.map((g) => h("tr", { data: { group: g.group } }, cells(
      g.spark_query ? [g.group, " ", h("span", { class: "pylog-tag pylog-spark-query", title: `${SPARK_QUERY_HELP}: ${g.spark_query}` }, "Spark query")] : g.group,
      g.state, String(g.generation),
      [String(g.coordinator), g.disagreement ? h("div", { class: "pylog-disagreement" }, `⚠ ${g.disagreement}`) : null],
      g.members.join(", "),
      g.offsets.map((o) => h("div", {}, `${o.topic}-${o.partition}: ${o.committed} (lag ${o.lag === null ? "?" : o.lag})`)),
      [String(g.offsets.reduce((sum, o) => sum + (o.lag || 0), 0)), " ", groupSpark(g.group)])));
    return h("table", { class: "pylog-table" },
      h("thead", {}, h("tr", {}, ["group", "state", "generation", "coordinator", "members", "committed (lag)", "total lag over time"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows));
  }

  function consumerGroupPanel(g) {
    const members = (g.consumer_members || []).slice().sort((a, b) =>
      a.client_id.localeCompare(b.client_id) || a.member_id.localeCompare(b.member_id));
    const holders = new Map(); // "topic-partition" -> the member that owns it now
    for (const m of members) for (const [t, p] of [...m.assignment, ...m.pending_revocation]) holders.set(`${t}-${p}`, m);
    const labelled = (label, epoch, help, kind) => h("span", { class: `pylog-cg-epoch ${kind}`, title: help, data: { epoch: String(epoch) } },
      `${label} `, epochChip(epoch));
    const head = h("div", { class: "pylog-cg-head" },
      h("span", { class: "pylog-cg-name" }, g.group),
      h("span", { class: "pylog-tag", title: CONSUMER_PROTOCOL_HELP }, "consumer protocol"),
      h("span", { class: `pylog-cg-state state-${String(g.state).toLowerCase()}`, title: CONSUMER_GROUP_STATE_HELP[g.state] || "" }, g.state),
      labelled("group epoch", g.group_epoch, GROUP_EPOCH_HELP, "group"),
      labelled("assignment epoch", g.assignment_epoch, ASSIGNMENT_EPOCH_HELP, "assignment"),
      h("span", { title: "the server-side assignor that computed the target assignment" }, `assignor ${g.assignor}`),
      h("span", {}, `coordinator ${g.coordinator}`));
    const rows = members.map((m) => h("tr", { class: "pylog-cg-member", data: { member: m.member_id, client: m.client_id } },
      h("td", {}, memberCell(m)),
      h("td", { class: "pylog-cg-member-epoch" }, memberEpoch(m, g)),
      h("td", {}, memberState(m, g)),
      h("td", { class: "pylog-cg-partitions" }, memberPartitions(m, holders)),
      h("td", { class: "pylog-cg-target" }, partitionsText(m.target_assignment)),
      h("td", {}, m.subscribed_topic_regex ? `regex ${m.subscribed_topic_regex}` : m.subscribed_topic_names.join(", "))));
    const heads = [["member", "client id and host; hover: member id and instance id"], ["member epoch", MEMBER_EPOCH_HELP],
      ["member state", "Kafka's member state: stable, unrevoked partitions (revoking), unreleased partitions (waiting for release)"],
      ["partitions", "what it owns, what it must revoke (↩) and what of its target it still waits for (dashed)"],
      ["target assignment", "its part of the target assignment computed for the assignment epoch"], ["subscription", "topic names, or a regular expression"]];
    const lag = g.offsets.reduce((sum, o) => sum + (o.lag || 0), 0);
    const offsets = h("div", { class: "pylog-cg-offsets" }, h("span", { class: "pylog-dim" }, "committed (lag): "),
      g.offsets.length ? g.offsets.map((o, i) => `${i ? ", " : ""}${o.topic}-${o.partition}: ${o.committed} (lag ${o.lag === null ? "?" : o.lag})`) : "nothing yet",
      g.offsets.length ? [` · total lag ${lag} `, groupSpark(g.group)] : null);
    return h("div", { class: "pylog-cg", data: { group: g.group, state: g.state } }, head,
      g.disagreement ? h("div", { class: "pylog-disagreement" }, `⚠ ${g.disagreement}`) : null,
      members.length ? h("table", { class: "pylog-table pylog-cg-members" },
        h("thead", {}, h("tr", {}, heads.map(([text, title]) => h("th", { title }, text)))), h("tbody", {}, rows))
        : h("div", { class: "pylog-dim" }, "no members"),
      offsets);
  }

  function memberCell(m) {
    const id = `member id ${m.member_id}${m.instance_id ? `, instance id ${m.instance_id}` : ""}`;
    return h("div", { title: id }, h("div", {}, m.client_id || "(no client id)"),
      h("div", { class: "pylog-dim" }, `${m.client_host} · ${m.member_id.slice(0, MEMBER_ID_SHOWN)}…`),
      m.instance_id ? h("div", { class: "pylog-dim" }, `static: ${m.instance_id}`) : null);
  }

  function memberEpoch(m, g) {
    const epoch = m.member_epoch;
    let note, cls = "";
    if (epoch === LEFT_STATIC_EPOCH) [note, cls] = ["left (static): keeps its partitions until it rejoins or its session ends", "behind"];
    else if (epoch === g.assignment_epoch) note = "= assignment epoch";
    else if (epoch < g.assignment_epoch) [note, cls] = [`${g.assignment_epoch - epoch} behind the assignment epoch`, "behind"];
    else note = "ahead of the assignment epoch";
    return h("span", { data: { epoch: String(epoch) } }, epochChip(epoch), " ", h("span", { class: `pylog-cg-epoch-note ${cls}` }, note));
  }

  function memberState(m, g) {
    const [text, help] = MEMBER_STATE_TEXT[m.member_state] || [m.member_state, ""];
    const detail = m.member_state === "unrevoked_partitions" ? ` (to reach epoch ${g.assignment_epoch})` : "";
    return h("span", { class: `pylog-cg-mstate mstate-${m.member_state}`, title: help, data: { state: m.member_state } }, text + detail);
  }

  // Every partition the member owns, must revoke, or waits for, as a labelled chip.
  function memberPartitions(m, holders) {
    const key = ([t, p]) => `${t}-${p}`;
    const has = (pairs) => new Set(pairs.map(key));
    const owned = has(m.assignment), unreleased = has(m.unreleased);
    const chips = [];
    for (const pair of m.assignment) chips.push(partitionChip(pair, "owned"));
    for (const pair of m.pending_revocation) chips.push(partitionChip(pair, "revoking"));
    for (const pair of m.target_assignment) {
      if (owned.has(key(pair))) continue;
      const holder = holders.get(key(pair));
      const waiting = unreleased.has(key(pair)) || (holder && holder.member_id !== m.member_id);
      chips.push(partitionChip(pair, waiting ? "unreleased" : "incoming",
        holder && holder.member_id !== m.member_id ? `, owned by ${holder.client_id} (${holder.member_id.slice(0, MEMBER_ID_SHOWN)})` : ""));
    }
    return chips.length ? chips : h("span", { class: "pylog-dim" }, "none");
  }

  function partitionChip([topic, partition], kind, more = "") {
    const text = `${topic}-${partition}`;
    const glyph = { revoking: "↩ ", unreleased: "… " }[kind] || "";
    return h("span", { class: `pylog-cg-p ${kind}`, data: { partition: text, kind }, title: `${text}: ${PARTITION_KIND_HELP[kind]}${more}` },
      glyph + text);
  }

  function partitionsText(pairs) {
    if (!pairs.length) return h("span", { class: "pylog-dim" }, "none");
    const byTopic = new Map();
    for (const [t, p] of pairs) byTopic.set(t, [...(byTopic.get(t) || []), p]);
    return [...byTopic].map(([t, ps]) => `${t}:${ps.join(",")}`).join(" ");
  }


  // -- share groups (KIP-932) -------------------------------------------------------------------

  // A panel per share group: its epochs, its members (each in a colour of its own), and per
  // share partition the start and end offsets on the partition's offset axis and a cell per
  // in-flight record, coloured by its state (acquired: its member's colour) with its delivery
  // count. The section shows only while the cluster has share groups.
  // -- clients: who is connected to each broker, by principal --------------------------------

  function drawClients() {
    const perBroker = shown().clients || [];
    const since = (ms) => h("span", { title: `connected since ${clock(ms)} (the oldest connection)` }, clock(ms).slice(0, 8));
    const more = (count) => (count ? h("span", { class: "pylog-dim" }, ` +${count} more`) : null);
    const listed = (values, count) => (values.length ? [values.join(", "), more(count)] : h("span", { class: "pylog-dim" }, "—"));
    const rows = [];
    for (const b of perBroker) {
      const brokerCell = () => h("td", {}, `broker ${b.broker_id}`);
      if (!b.answering) {
        rows.push(h("tr", { class: "pylog-clients-silent", data: { broker: String(b.broker_id) } }, brokerCell(),
          h("td", { class: "pylog-dim", colspan: 6 }, "does not answer: who it serves is unknown")));
        continue;
      }
      for (const p of b.principals) {
        const name = p.principal === null ? "(not signed in yet)" : p.principal;
        rows.push(h("tr", { class: "pylog-clients-principal", data: { broker: String(b.broker_id), principal: name } },
          brokerCell(),
          h("td", { class: "pylog-clients-name", title: p.mechanisms.length ? `signed in with ${p.mechanisms.join(", ")}` : "" }, name),
          h("td", { class: "pylog-clients-ids" }, listed(p.client_ids, p.client_ids_more)),
          h("td", { class: "pylog-clients-software", title: SOFTWARE_HELP }, listed(p.software, 0)),
          h("td", {}, p.hosts.join(", ")),
          h("td", { class: "pylog-num" }, String(p.connections)),
          h("td", {}, since(p.since_ms))));
      }
      if (b.principals_more) {
        rows.push(h("tr", { data: { broker: String(b.broker_id) } }, brokerCell(),
          h("td", { class: "pylog-dim", colspan: 6 }, `and ${plural(b.principals_more, "more principal")}`)));
      }
      if (b.brokers) {
        rows.push(h("tr", { class: "pylog-clients-brokers", title: INTER_BROKER_HELP, data: { broker: String(b.broker_id), principal: "brokers" } },
          brokerCell(), h("td", {}, "brokers"),
          h("td", { colspan: 3, class: "pylog-dim" }, b.brokers.principals.join(", ")),
          h("td", { class: "pylog-num" }, String(b.brokers.connections)), h("td", {}, since(b.brokers.since_ms))));
      }
      if (!b.principals.length && !b.brokers) {
        rows.push(h("tr", { data: { broker: String(b.broker_id) } }, brokerCell(), h("td", { class: "pylog-dim", colspan: 6 }, "no connections")));
      }
      if (b.untracked) {
        rows.push(h("tr", { data: { broker: String(b.broker_id) } }, brokerCell(),
          h("td", { class: "pylog-dim", colspan: 6 }, `and ${plural(b.untracked, "more connection")} past what the broker lists`)));
      }
    }
    if (!rows.length) {
      parts.clients.replaceChildren(h("div", { class: "pylog-dim" }, "no brokers answer"));
      return;
    }
    const heads = [["broker", ""], ["principal", "the user the connections signed in as (hover: the SASL mechanism)"],
      ["client ids", "the client.id each connection sends"], ["software", SOFTWARE_HELP], ["hosts", "where they connect from"],
      ["connections", "live connections of this principal to this broker"], ["since", "the oldest of them connected at"]];
    parts.clients.replaceChildren(h("table", { class: "pylog-table pylog-clients-table", title: CLIENTS_HELP },
      h("thead", {}, h("tr", {}, heads.map(([text, title]) => h("th", { title }, text)))),
      h("tbody", {}, rows)));
  }

  function drawShareGroups() {
    const groups = (shown().groups || []).filter((g) => g.group_type === SHARE_GROUP);
    const sectionEl = parts.shares.parentElement;
    if (sectionEl) sectionEl.hidden = !groups.length;
    parts.shares.replaceChildren(...groups.map(shareGroupPanel));
  }

  function shareGroupPanel(g) {
    const members = (g.share_members || []).slice().sort((a, b) =>
      a.client_id.localeCompare(b.client_id) || a.member_id.localeCompare(b.member_id));
    const colours = new Map(members.map((m, i) => [m.member_id, i % MEMBER_COLOURS]));
    const names = new Map(members.map((m) => [m.member_id, memberName(m)]));
    const labelled = (label, epoch, help, kind) => h("span", { class: `pylog-cg-epoch ${kind}`, title: help, data: { epoch: String(epoch) } },
      `${label} `, epochChip(epoch));
    const shares = g.share_partitions || [];
    const lag = shares.every((p) => p.lag !== null && p.lag !== undefined) ? shares.reduce((sum, p) => sum + p.lag, 0) : null;
    const head = h("div", { class: "pylog-cg-head" },
      h("span", { class: "pylog-cg-name" }, g.group),
      h("span", { class: "pylog-tag", title: SHARE_GROUP_HELP }, "share group"),
      h("span", { class: `pylog-cg-state state-${String(g.state).toLowerCase()}`, title: SHARE_GROUP_STATE_HELP[g.state] || "" }, g.state),
      labelled("group epoch", g.group_epoch, SHARE_GROUP_EPOCH_HELP, "group"),
      labelled("assignment epoch", g.assignment_epoch, SHARE_ASSIGNMENT_EPOCH_HELP, "assignment"),
      h("span", { title: "the share group's assignor" }, `assignor ${g.assignor}`),
      h("span", {}, `coordinator ${g.coordinator}`),
      shares.length ? h("span", { class: "pylog-sg-lag", title: "lag (KIP-1226): records from the start offset up to the high watermark not yet acknowledged or archived, over its share partitions" },
        `lag ${lag === null ? "?" : lag} `, groupSpark(g.group)) : null);
    const held = new Map(); // member id -> [records acquired, earliest lock deadline]
    for (const p of shares) {
      for (const [, state, , memberId, deadline] of p.records) {
        if (state !== "acquired") continue;
        const [count, first] = held.get(memberId) || [0, Infinity];
        held.set(memberId, [count + 1, Math.min(first, deadline)]);
      }
    }
    const rows = members.map((m) => {
      const [count, first] = held.get(m.member_id) || [0, null];
      return h("tr", { class: "pylog-sg-member", data: { member: m.member_id, client: m.client_id } },
        h("td", {}, h("div", { title: `member id ${m.member_id}` },
          h("span", { class: `pylog-sg-swatch member-${colours.get(m.member_id)}` }), " ", m.client_id || "(no client id)",
          h("div", { class: "pylog-dim" }, `${m.client_host} · ${m.member_id.slice(0, MEMBER_ID_SHOWN)}…`))),
        h("td", { class: "pylog-cg-member-epoch" }, shareMemberEpoch(m, g)),
        h("td", { class: "pylog-cg-partitions" }, m.assignment.length
          ? m.assignment.map(([t, p]) => h("span", { class: "pylog-cg-p owned", data: { partition: `${t}-${p}` }, title: `${t}-${p}: read by this member (perhaps with others)` }, `${t}-${p}`))
          : h("span", { class: "pylog-dim" }, "none")),
        h("td", { class: "pylog-sg-held", data: { held: String(count) } }, count
          ? `${plural(count, "record")} acquired, first lock until ${clock(first)}` : h("span", { class: "pylog-dim" }, "nothing acquired")),
        h("td", {}, m.subscribed_topic_names.join(", ")));
    });
    const heads = [["member", "client id, host and member id; the colour marks the records it has acquired"],
      ["member epoch", SHARE_MEMBER_EPOCH_HELP], ["reads", "the partitions the assignor gave it; several members may read one partition"],
      ["holds", "records it has acquired and not yet settled, and when the first lock runs out"], ["subscription", "topic names"]];
    return h("div", { class: "pylog-sg", data: { group: g.group, state: g.state } }, head,
      g.disagreement ? h("div", { class: "pylog-disagreement" }, `⚠ ${g.disagreement}`) : null,
      members.length ? h("table", { class: "pylog-table pylog-cg-members pylog-sg-members" },
        h("thead", {}, h("tr", {}, heads.map(([text, title]) => h("th", { title }, text)))), h("tbody", {}, rows))
        : h("div", { class: "pylog-dim" }, "no members"),
      shares.length ? shares.map((p) => sharePartition(p, colours, names))
        : h("div", { class: "pylog-dim" }, "no share partition yet: one appears at a partition's leader with the group's first fetch from it"));
  }

  function memberName(m) {
    return `${m.client_id || "?"} (${m.member_id.slice(0, MEMBER_ID_SHOWN)})`;
  }

  function shareMemberEpoch(m, g) {
    const epoch = m.member_epoch;
    const behind = epoch < g.assignment_epoch;
    const note = behind ? `${g.assignment_epoch - epoch} behind the assignment epoch (takes it at its next heartbeat)` : "= assignment epoch";
    return h("span", { data: { epoch: String(epoch) } }, epochChip(epoch), " ", h("span", { class: `pylog-cg-epoch-note ${behind ? "behind" : ""}` }, note));
  }

  // One share partition: its head, its offset axis with the SPSO and SPEO, its in-flight cells.
  function sharePartition(p, colours, names) {
    const name = `${p.topic}-${p.partition}`;
    const counts = p.counts || {};
    const stateCounts = ["available", "acquired", "acknowledged", "archived"].filter((k) => counts[k])
      .map((k) => h("span", { class: `pylog-sg-count state-${k}`, title: RECORD_STATE_HELP[k] }, `${counts[k]} ${k}`));
    const head = h("div", { class: "pylog-sgp-head" },
      h("span", { class: "pylog-p-name" }, name),
      h("span", { title: "the partition's leader, which keeps the share partition" }, `leader ★ ${p.leader}`),
      h("span", { title: SPSO_HELP }, `start offset ${p.start_offset}`),
      h("span", { title: SPEO_HELP }, `end offset ${p.end_offset}`),
      h("span", { class: "pylog-dim" }, `HW ${p.high_watermark ?? "?"}`),
      h("span", {}, `${p.in_flight} in flight`, stateCounts.length ? ": " : "", stateCounts.flatMap((node, i) => (i ? [", ", node] : [node]))),
      h("span", { class: "pylog-dim", title: "group.share.delivery.count.limit and group.share.record.lock.duration.ms" },
        `delivery limit ${p.delivery_count_limit} · lock ${seconds(p.record_lock_duration_ms)}`));
    return h("div", { class: "pylog-sgp", data: { partition: name, start: String(p.start_offset), end: String(p.end_offset) } },
      head, shareAxis(p), shareCells(p, colours, names));
  }

  // The partition's log from its start to its LEO (dark up to the HW), the share partition's
  // window [SPSO, SPEO) over it, and a tick with its label at each of the two.
  function shareAxis(p) {
    const low = Math.min(p.log_start_offset ?? p.start_offset, p.start_offset);
    const high = Math.max(low + 1, p.log_end_offset ?? 0, p.high_watermark ?? 0, p.end_offset);
    const at = (offset) => `${((offset - low) / (high - low)) * 100}%`;
    const span = (from, to) => `${((to - from) / (high - low)) * 100}%`;
    const hw = p.high_watermark ?? p.end_offset;
    const side = (offset) => { // a label near an end of the axis grows inwards, not off it
      const at01 = (offset - low) / (high - low);
      return at01 < 0.1 ? " from-left" : at01 > 0.9 ? " from-right" : "";
    };
    const tick = (offset, kind, label, help) => h("div", { class: `pylog-sg-tick ${kind}`, style: `left:${at(offset)}`, title: `${label}: ${help}`, data: { offset: String(offset) } },
      h("span", { class: `pylog-sg-tick-label${side(offset)}` }, label));
    return h("div", { class: "pylog-sg-axis", role: "img",
      "aria-label": `${p.topic}-${p.partition}: log ${low} to ${high}, share partition from ${p.start_offset} to ${p.end_offset}` },
    h("span", { class: "pylog-sg-axis-end low" }, String(low)),
    h("div", { class: "pylog-sg-track" },
      h("div", { class: "pylog-sg-log", style: `left:0;width:${span(low, hw)}`, title: `offsets ${low} to ${hw - 1}: committed (below the HW ${hw})` }),
      hw < high ? h("div", { class: "pylog-sg-log uncommitted", style: `left:${at(hw)};width:${span(hw, high)}` }) : null,
      p.start_offset > low ? h("div", { class: "pylog-sg-done", style: `left:0;width:${span(low, p.start_offset)}`, title: `offsets below ${p.start_offset}: done with (${SPSO_HELP})` }) : null,
      p.end_offset > p.start_offset ? h("div", { class: "pylog-sg-window", style: `left:${at(p.start_offset)};width:${span(p.start_offset, p.end_offset)}`,
        title: `in flight: offsets ${p.start_offset} to ${p.end_offset - 1}, each with a state (the cells below)` }) : null,
      tick(p.start_offset, "spso", `SPSO ${p.start_offset}`, SPSO_HELP),
      tick(p.end_offset, "speo", `SPEO ${p.end_offset}`, SPEO_HELP)),
    h("span", { class: "pylog-sg-axis-end high" }, String(high)));
  }

  function shareCells(p, colours, names) {
    const limit = p.delivery_count_limit;
    const cell = ([offset, state, count, memberId, deadline]) => {
      const classes = ["pylog-sg-cell", `state-${state}`];
      if (count >= limit) classes.push("at-limit");
      let what = RECORD_STATE_HELP[state] || state;
      if (state === "acquired") {
        classes.push(colours.has(memberId) ? `member-${colours.get(memberId)}` : "member-gone");
        what = `acquired by member ${names.get(memberId) || `${String(memberId).slice(0, MEMBER_ID_SHOWN)} (no longer in the group)`}, locked until ${clock(deadline)}`;
      } else if (state === "archived") {
        what = count >= limit ? `archived: delivered ${count} times, the delivery limit` : "archived: rejected";
      }
      return h("span", { class: classes.join(" "), data: { offset: String(offset), state, count: String(count), member: memberId || "" },
        title: `offset ${offset}: ${what}; delivery count ${count} of ${limit}` }, String(count));
    };
    const chunks = [];
    for (let i = 0; i < p.records.length; i += SHARE_CHUNK) {
      const run = p.records.slice(i, i + SHARE_CHUNK);
      chunks.push(h("span", { class: "pylog-sg-chunk" }, h("span", { class: "pylog-sg-chunk-offset" }, String(run[0][0])), h("span", { class: "pylog-sg-run" }, run.map(cell))));
    }
    const beyond = p.records_beyond > 0 ? h("span", { class: "pylog-sg-beyond", title: "the broker lists the first in-flight records from the start offset; the counts above cover them all" },
      `+ ${plural(p.records_beyond, "more record")} in flight`) : null;
    return h("div", { class: "pylog-sg-cells", "aria-label": `in-flight records of ${p.topic}-${p.partition}` },
      chunks.length ? chunks : h("span", { class: "pylog-dim" }, "nothing in flight"), beyond);
  }

  // -- timeline: marks, step/replay controls, the shown snapshot's events --------------------

  const slider = h("input", { type: "range", class: "pylog-slider", min: 0, max: 0, step: 1,
    "aria-label": "recorded snapshot" });
  slider.addEventListener("change", () => showSeq(Number(slider.value)));
  const where = h("span", { class: "pylog-where" });
  const strip = h("div", { class: "pylog-strip" });
  const events = h("div", { class: "pylog-events" });
  const shownSeq = () => (replaying() ? replay().seq : live.timeline.last_seq || 0);
  const step = {
    oldest: h("button", { class: "pylog-oldest", title: "the oldest snapshot kept",
      onclick: () => showSeq(live.timeline.first_seq) }, "|◀ oldest"),
    back: h("button", { class: "pylog-back", title: "one snapshot back", onclick: () => showSeq(shownSeq() - 1) }, "◀ step back"),
    forward: h("button", { class: "pylog-forward", title: "one snapshot forward", onclick: () => showSeq(shownSeq() + 1) }, "step forward ▶"),
    live: h("button", { class: "pylog-live", title: "follow the cluster as it is now", onclick: () => send({ type: "live" }) }, "● live"),
  };
  const controls = h("div", { class: "pylog-controls" }, step.oldest, step.back, slider, step.forward, step.live, where);
  parts.timeline.append(strip, controls, events);

  function drawTimeline() {
    const timeline = live.timeline;
    const first = timeline.first_seq || 0, last = timeline.last_seq || 0;
    slider.min = String(first);
    slider.max = String(last);
    slider.value = String(shownSeq());
    slider.disabled = last <= first;
    step.oldest.disabled = step.back.disabled = shownSeq() <= first;
    step.forward.disabled = step.live.disabled = !replaying();
    const kept = last - first + 1;
    where.textContent = replaying()
      ? `replaying snapshot ${replay().seq} of ${first}–${last} (${clock(replay().taken_ms)})`
      : `live · ${last ? plural(kept, "change") : "nothing"} recorded since ${timeline.first_ms ? clock(timeline.first_ms) : "—"}`;
    where.classList.toggle("replaying", replaying());
    drawStrip(timeline);
    drawEvents();
  }

  function drawStrip(timeline) {
    const marks = live.marks;
    const t0 = Math.min(timeline.first_ms || 0, ...marks.map((m) => m.now_ms));
    const t1 = Math.max(timeline.last_ms || 0, t0 + 1000);
    const x = (ms) => 8 + ((ms - t0) / (t1 - t0)) * (STRIP_UNITS - 16);
    const svg = s("svg", { class: "pylog-strip-svg", viewBox: `0 0 ${STRIP_UNITS} 44`, preserveAspectRatio: "none" },
      s("line", { class: "pylog-axis", x1: 8, y1: 30, x2: STRIP_UNITS - 8, y2: 30 }));
    for (const stack of markStacks(marks, x)) svg.append(markStack(stack));
    const cursorMs = replaying() ? replay().taken_ms : timeline.last_ms;
    if (cursorMs) {
      svg.append(s("path", { class: "pylog-cursor", d: `M ${x(cursorMs) - 5} 42 L ${x(cursorMs) + 5} 42 L ${x(cursorMs)} 33 Z` },
        tip(replaying() ? "the snapshot shown" : "now")));
    }
    const labels = h("div", { class: "pylog-strip-labels" },
      h("span", {}, timeline.first_ms ? clock(t0) : ""), h("span", {}, timeline.last_ms ? clock(t1) : ""));
    strip.replaceChildren(svg, labels);
  }

  // One hover target per stack of marks too close to point at one by one: its tooltip lists
  // them all, a click replays the first.
  function markStack(stack) {
    const first = stack.marks[0];
    const categories = [...new Set(stack.marks.map((m) => markCategory(m)))];
    const listed = stack.marks.slice(0, MARKS_LISTED_MAX).map((m) => `${clock(m.now_ms)} ${m.source}: ${m.text}`);
    const more = stack.marks.length - listed.length;
    const head = stack.marks.length === 1 ? "" : `${stack.marks.length} events here (click to replay from the first):\n`;
    const text = head + listed.join("\n") + (more > 0 ? `\n… and ${more} more` : "") +
      (stack.marks.length === 1 ? " (click to replay)" : "");
    const g = s("g", { class: `pylog-mark ${categories.map((c) => `cat-${c}`).join(" ")}`,
      data: { seq: String(first.seq), count: String(stack.marks.length) }, onclick: () => showSeq(first.seq) });
    // Drawn in order of weight, so an election at the same moment as a broker change is on top.
    for (const m of stack.marks.slice().sort((a, b) => markWeight(a) - markWeight(b))) {
      g.append(s("line", { class: `cat-${markCategory(m)}`, x1: m.x, y1: 8, x2: m.x, y2: 30 }));
    }
    g.append(s("rect", { class: "pylog-mark-hit", x: stack.x0 - MARK_HIT_UNITS / 2, y: 4,
      width: stack.x1 - stack.x0 + MARK_HIT_UNITS, height: 30 }), tip(text)); // the hit area on top
    return g;
  }

  function drawEvents() { // a chosen topic's own, and those about no topic (brokers, groups)
    const mine = (e) => !focus.topic || !e.topic || e.topic === focus.topic;
    const list = (shown().events || []).filter(mine).reverse();
    const rows = list.map((e) => h("div", { class: `pylog-event cat-${CATEGORIES.includes(e.category) ? e.category : "other"}` },
      h("span", { class: "pylog-dot" }), h("code", {}, clock(e.now_ms)), " ",
      h("span", { class: "pylog-source" }, e.source), " ", h("span", {}, e.text)));
    events.replaceChildren(h("div", { class: "pylog-events-title" },
      (replaying() ? "Events up to the replayed snapshot" : "Latest events") +
      (focus.topic ? ` of topic ${focus.topic} and the brokers` : "") + " (newest first)"),
    ...(rows.length ? rows : [h("div", { class: "pylog-dim" }, "no events yet")]));
  }

  // -- wiring ---------------------------------------------------------------------------------

  // Each full draw is a User Timing measure (DRAW_MEASURE), cleared at once so a long-lived
  // page keeps none: a PerformanceObserver still sees every one (bench/view_browser.py).
  function drawShown() {
    const started = performance.now();
    drawHead();
    drawTopology();
    drawActions();
    drawPartitions();
    drawTraffic();
    drawGroups();
    drawClients();
    drawTimeline();
    performance.measure(DRAW_MEASURE, { start: started });
    performance.clearMeasures(DRAW_MEASURE);
  }

  // Whether a kernel is behind this view: "asking" until it answers hello ("answering"), or
  // "silent" once KERNEL_ANSWER_MS passed without an answer (busy, or gone: see NO_KERNEL_TEXT).
  function askTheKernel() {
    page.kernel = "asking";
    send({ type: "hello" });
    return setTimeout(() => {
      if (page.kernel !== "asking") return;
      page.kernel = "silent";
      drawHead();
    }, KERNEL_ANSWER_MS);
  }

  function onKernelMessage(content) {
    if (!content || content.type !== "hello" || page.kernel === "answering") return;
    page.kernel = "answering";
    drawHead();
  }

  let inflating = Promise.resolve(); // one after the other: a newer delta never lands first
  function onChange() {
    inflating = inflating.then(inflateTraits).then(redrawLive, (error) => {
      live.error = String(error);
      drawHead();
    });
  }

  function redrawLive() {
    const before = live.key;
    refreshLive();
    if (live.key === before) return; // base and delta change in one message: draw once
    if (replaying()) {
      drawHead();
      drawTimeline();
    } else {
      drawShown();
    }
  }

  const handlers = [
    ["change:delta_z", onChange],
    ["change:base_z", onChange],
    ["change:marks", () => drawTimeline()],
    ["change:replay", drawShown],
    ["change:action", onAction],
    ["change:status", drawHead],
    ["change:show_internal", drawPartitions],
    ["msg:custom", onKernelMessage],
  ];
  for (const [name, handler] of handlers) model.on(name, handler);
  drawShown();
  onChange();
  const silence = askTheKernel();
  return () => {
    clearTimeout(silence);
    for (const [name, handler] of handlers) model.off(name, handler);
  };
}

function markCategory(m) {
  return CATEGORIES.includes(m.category) ? m.category : "other";
}

function markWeight(m) {
  return CATEGORIES.length - CATEGORIES.indexOf(markCategory(m));
}

// Timeline marks, oldest first, in stacks of those within MARK_STACK_UNITS of the stack's first.
function markStacks(marks, x) {
  const stacks = [];
  for (const m of marks.slice().sort((a, b) => a.now_ms - b.now_ms || a.seq - b.seq)) {
    const mx = x(m.now_ms);
    const last = stacks[stacks.length - 1];
    if (last && mx - last.x0 <= MARK_STACK_UNITS) {
      last.marks.push({ ...m, x: mx });
      last.x1 = mx;
    } else {
      stacks.push({ x0: mx, x1: mx, marks: [{ ...m, x: mx }] });
    }
  }
  return stacks;
}

// The hatching of a truncated range and the gaps of a compacted one, defined once per view
// (bars refer to them by id).
// Open transactions hold the LSO below the HW (a follower's HW may lag its leader's: the same).
function lsoBelowHw(r) {
  return r.last_stable_offset < r.high_watermark;
}

function markerClass(kind) {
  return kind === "COMMIT" ? "commit" : kind === "ABORT" ? "abort" : "other";
}

function hatchPattern(uid) {
  return s("svg", { class: "pylog-defs", width: 0, height: 0, "aria-hidden": "true" },
    s("defs", {}, s("pattern", { id: `${uid}-hatch`, patternUnits: "userSpaceOnUse", width: 6, height: 6,
      patternTransform: "rotate(45)" },
    s("rect", { class: "pylog-hatch-bg", x: 0, y: 0, width: 6, height: 6 }),
    s("line", { class: "pylog-hatch-line", x1: 1, y1: 0, x2: 1, y2: 6 })),
    s("pattern", { id: `${uid}-gaps`, patternUnits: "userSpaceOnUse", width: 4, height: 12 },
      s("rect", { class: "pylog-gap", x: 0, y: 0, width: 2, height: 12 }))));
}

// Two triangles pointing back, drawn (the ⏪ character is missing from common fonts).
function rewindIcon() {
  return s("svg", { class: "pylog-rewind", viewBox: "0 0 20 12", "aria-hidden": "true" },
    s("path", { d: "M 10 0 L 10 12 L 1 6 Z M 19 0 L 19 12 L 10 6 Z" }));
}

function section(title, body, className) {
  return h("div", { class: `pylog-section ${className}` }, h("div", { class: "pylog-section-title" }, title), body);
}

// -- legend: every mark the view draws -------------------------------------------------------

function legend(uid) {
  const swatch = (cls) => s("svg", { class: "pylog-swatch", viewBox: "0 0 20 14" }, s("circle", { class: cls, cx: 10, cy: 7, r: 6 }));
  const barSwatch = (cls) => s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 14" },
    s("rect", { class: "pylog-track", x: 0, y: 1, width: 40, height: 12 }),
    s("rect", { class: cls, x: 0, y: 1, width: 40, height: 12, style: "fill:var(--pylog-epoch-0)" }));
  const epochBar = s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 14" },
    [0, 1, 2].map((e) => s("rect", { x: e * 40 / 3, y: 1, width: 40 / 3, height: 12, style: `fill:${epochColour(e)}` })));
  const hatched = s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 14" },
    s("rect", { class: "pylog-track", x: 0, y: 1, width: 40, height: 12 }),
    s("rect", { class: "pylog-truncated", x: 0, y: 1, width: 40, height: 12, style: `fill:url(#${uid}-hatch)` }));
  const gaps = s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 14" },
    s("rect", { class: "pylog-track", x: 0, y: 1, width: 40, height: 12 }),
    s("rect", { x: 0, y: 1, width: 40, height: 12, style: "fill:var(--pylog-epoch-0)" }),
    s("rect", { class: "pylog-compaction-gap", x: 0, y: 1, width: 40, height: 12, style: `fill:url(#${uid}-gaps);opacity:0.8` }));
  const lsoSwatch = s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 16" },
    s("rect", { class: "pylog-track", x: 0, y: 2, width: 40, height: 12 }),
    s("rect", { x: 0, y: 2, width: 34, height: 12, style: "fill:var(--pylog-epoch-0)" }),
    s("line", { class: "pylog-lso", x1: 20, y1: 0, x2: 20, y2: 16 }),
    s("line", { class: "pylog-hw-tick", x1: 34, y1: 0, x2: 34, y2: 16 }));
  const openTxnSwatch = s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 16" },
    s("rect", { class: "pylog-track", x: 0, y: 2, width: 40, height: 12 }),
    s("rect", { x: 0, y: 2, width: 40, height: 12, style: "fill:var(--pylog-epoch-0)" }),
    s("rect", { class: "pylog-open-txn", x: 20, y: 0, width: 20, height: 2 }));
  const markerSwatch = (kind) => s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 16" },
    s("rect", { class: "pylog-track", x: 0, y: 2, width: 40, height: 12 }),
    s("rect", { x: 0, y: 2, width: 40, height: 12, style: "fill:var(--pylog-epoch-0)" }),
    s("g", { class: `pylog-marker ${markerClass(kind)}` },
      s("line", { class: "pylog-marker-halo", x1: 20, y1: 1, x2: 20, y2: 16 }),
      s("line", { class: "pylog-marker-tick", x1: 20, y1: 1, x2: 20, y2: 16 })));
  const markerSwatches = h("span", {}, markerSwatch("COMMIT"), markerSwatch("ABORT"));
  const cell = (state) => h("span", { class: `pylog-cell health-${state}` }, h("span", { class: "pylog-cell-p" }, "7"), h("span", { class: "pylog-cell-l" }, "★2"));
  const spark = s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 14" },
    s("polyline", { class: "pylog-spark-line line-0", points: "0,12 12,9 24,6 40,2" }),
    s("polyline", { class: "pylog-spark-line line-1", points: "0,10 12,7 24,4 40,1" }));
  const item = (mark, text) => h("div", { class: "pylog-legend-item" }, mark, h("span", {}, text));
  const nodes = STATES.map((state) => item(swatch(`legend-state state-${state}`), `${state}: ${STATE_HELP[state]}`));
  const ctrlSwatch = (cls, ring) => s("svg", { class: "pylog-swatch wide", viewBox: "0 0 40 14" },
    ring ? s("rect", { class: "pylog-ctrl-active-ring", x: 1, y: 1, width: 38, height: 12, rx: 4 }) : null,
    s("rect", { class: cls, x: 4, y: 3, width: 32, height: 8, rx: 3 }));
  const ctrlText = (cls, text) => h("span", { class: `pylog-legend-ctrl ${cls}` }, text);
  const controllers = [
    item(ctrlSwatch("legend-state state-up", true), "★, ringed: the active controller, the Raft leader at the newest epoch once that epoch has begun; the brokers follow it (the links)"),
    item(ctrlSwatch("legend-state state-paused"), "box colour: its state, as for brokers"),
    item(ctrlText("role", "follower of 2 · epoch 3"), "its role and Raft epoch: leader, follower (of the leader it knows), candidate, prospective (pre-vote: the epoch not raised yet), unattached (knows no leader)"),
    item(ctrlText("nums", "committed 57 · lag 0"), "committed: its metadata log's high watermark (+N: written above it); lag: records behind the active controller's log end, as that one reports"),
    item(ctrlText("last", "was leader · epoch 3"), "greyed, last known: it does not answer (paused, down); what it last said"),
    item(ctrlText("stale", "⚠ claims leader (stale epoch 2)"), "a leadership claim at an older epoch than a controller reports: over, never a second active controller"),
  ];
  const cats = CATEGORIES.map((c) => item(h("span", { class: `pylog-dot cat-${c}` }), `${c}: ${CATEGORY_HELP[c]}`));
  const epochs = h("span", {}, [0, 1, 2, 3].map((e) => h("span", { class: "pylog-chip", style: `background:${epochColour(e)}` }, String(e))));
  return h("details", { class: "pylog-legend" }, // folded: open it when a mark puzzles you
    h("summary", {}, "Legend: what every mark means"),
    h("div", { class: "pylog-legend-grid" },
      h("div", {}, h("div", { class: "pylog-legend-head" }, "Brokers"), nodes,
        item(h("span", { class: "pylog-cut" }, "✕"), "cut link: the broker is isolated"),
        item(swatch("legend-pending"), "pulsing ring: an action was sent and is pending")),
      h("div", {}, h("div", { class: "pylog-legend-head" }, "Controllers (the metadata quorum; click one for its faults)"), controllers),
      h("div", {}, h("div", { class: "pylog-legend-head" }, "Replica logs"),
        item(barSwatch("pylog-committed"), "dark: committed, below the high watermark (HW): consumers can read it"),
        item(barSwatch("pylog-uncommitted-part"), "light: written but not yet committed (HW up to the log end offset, LEO)"),
        item(epochBar, "bar colours: the leader epoch that wrote each offset range (the replica's leader-epoch cache); a new colour starts where a new leader began writing"),
        item(epochs, "chip: the leader epoch a replica (or, in the partition's head, the controller) is at"),
        item(hatched, "hatched, with ✂: a range the follower truncated (removed) in the last 30 s, to match its leader"),
        item(lsoSwatch, "orange tick: the LSO (last stable offset), shown where it is below the HW. read_committed consumers read only below it: an open transaction holds it at its first record until the transaction's commit or abort marker is written; read_uncommitted consumers read up to the HW"),
        item(openTxnSwatch, "orange line above the bar: an open transaction, from its first record (hover: its producer id); \"1 open transaction\" counts them"),
        item(markerSwatches, "green tick: a commit marker; red dashed tick: an abort marker. A marker: an offset no consumer receives (hover: which transaction it ends, its producer id)"),
        item(gaps, "striped: a compacted range; the more stripes, the more offsets compaction emptied (hover: how many records it kept)"),
        item(h("span", { class: "pylog-dim" }, "0 … 52"), "the offset axis: every bar of a topic starts at the same x and has the same pixels per offset, so a longer log is a longer bar"),
        item(h("span", { class: "pylog-lag" }, "lag 120 records"), "a follower's distance from the leader's LEO; \"behind 3.2 s\": how long it has not been caught up; \"lag unknown\": its broker does not answer"),
        item(spark, "sparkline: a partition's HW (solid) and LEO (dashed) over the recorded changes, with the write rate; in groups, total lag"),
        item(h("b", {}, "★"), "the leader the controller chose: one per partition"),
        item(h("span", { class: "pylog-tag" }, "out of ISR"), "dashed outline: not in the in-sync replica set"),
        item(h("span", { class: "pylog-tag" }, "last known state"), "grey: the broker does not answer (\"down since 12:01:03\", \"paused since …\"); its last report, and what it last claimed"),
        item(h("span", { class: "pylog-disagreement" }, "⚠"), "the broker's own view differs from the controller's (a stale claim is never a second leader)")),
      h("div", {}, h("div", { class: "pylog-legend-head" }, "Partition grid (shown past a dozen partitions; click a cell to show it alone)"),
        Object.entries(HEALTH_HELP).map(([state, text]) => item(cell(state), `${text}; 7 is the partition, ★2 its leader`)),
        h("div", { class: "pylog-legend-head" }, "Timeline marks (hover: the events at that moment; click: replay)"), cats,
        h("div", { class: "pylog-legend-head" }, "Consumer groups of the consumer protocol (KIP-848)"),
        item(h("span", {}, "group epoch ", h("span", { class: "pylog-chip", style: `background:${epochColour(3)}` }, "3")), `${GROUP_EPOCH_HELP}; ${ASSIGNMENT_EPOCH_HELP}; ${MEMBER_EPOCH_HELP}. A chip's colour is its epoch: a member whose chip differs from the assignment epoch's has not caught up`),
        Object.keys(PARTITION_KIND_HELP).map((kind) => item(h("span", { class: `pylog-cg-p ${kind}` }, `${{ revoking: "↩ ", unreleased: "… " }[kind] || ""}t-0`), PARTITION_KIND_HELP[kind])),
        h("div", { class: "pylog-legend-head" }, "Share groups (KIP-932)"),
        ["available", "acquired", "acknowledged", "archived"].map((state) => item(
          h("span", { class: `pylog-sg-cell state-${state}${state === "acquired" ? " member-0" : ""}` }, "1"), RECORD_STATE_HELP[state])),
        item(h("span", { class: "pylog-sg-cell state-archived at-limit" }, "3"), "the number: the record's delivery count; underlined red: it reached the delivery limit (a record acquired then comes back archived)"),
        item(h("span", {}, [0, 1, 2].map((i) => h("span", { class: `pylog-sg-swatch member-${i}` }))), "an acquired record takes its member's colour (the swatch before the member's name)"),
        item(h("span", { class: "pylog-sg-legend-axis" }, h("span", { class: "pylog-sg-tick-label" }, "SPSO"), " ", h("span", { class: "pylog-sg-tick-label" }, "SPEO")), `on the partition's offset axis: ${SPSO_HELP}; ${SPEO_HELP}. Between them (outlined), the in-flight records, one cell each, the first offset of every ${SHARE_CHUNK} above them`),
        h("div", { class: "pylog-legend-head" }, "Traffic"),
        item(h("span", {}, "records in"), "per broker, measured by the kernel between two snapshots; \"fetched by followers\" is what replication costs"),
        h("div", { class: "pylog-legend-head" }, "Clients"),
        item(h("span", { class: "pylog-clients-name" }, "User:alice"), `${CLIENTS_HELP}; one row per principal and broker`),
        item(h("span", { class: "pylog-clients-brokers" }, "brokers"), `one row: ${INTER_BROKER_HELP}`)))); 
}

export default { render };
