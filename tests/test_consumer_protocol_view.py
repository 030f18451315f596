"""Consumer groups of KIP-848's consumer protocol, as the notebook shows them: the admin
endpoint's JSON, ``groups_frame``/``members_frame``, ``%log_groups`` and ``%log_consume
--protocol consumer``, the live view's group panel and its timeline, against a real broker
process and real confluent-kafka consumers (``group.protocol=consumer``).

A member that stops polling cannot revoke (librdkafka hands the revocation to the application
in ``poll``), so holding one member's poll while another joins keeps the group mid-rebalance
for as long as a test looks: the holder stays at its old epoch with partitions pending
revocation, the newcomer at the new epoch waiting for them to be released.

The view is drawn on a bare page (``support.view_page``: the real ES module and CSS in
Chromium, Debian's ``/usr/bin/chromium``) from snapshots and timeline marks taken of the real
cluster. ``PYLOG_DOCS_IMAGES=1`` also writes the picture docs/view.md shows,
``docs/images/consumer-groups.png``; otherwise screenshots go to a temporary directory (printed).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
from confluent_kafka import Consumer
from IPython.core.interactiveshell import InteractiveShell
from support import view_page
from support.clients import kafka_conf, wait_for
from support.lab import headless_chromium
from support.view_recorder import Recorder

from pylog_nb import LocalCluster
from pylog_nb.client import groups_frame, members_frame
from pylog_nb.client.config import CLIENT_LOG
from pylog_nb.client.groups import GROUP_COLUMNS, MEMBER_COLUMNS
from pylog_nb.client.io import create_topic, produce
from pylog_nb.widgets.render import render_groups
from pylog_nb.widgets.snapshot import _rebalance_steps

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture fails with how to install it (lab.missing_browser)
    expect = None

PARTITIONS = 4
POLL_S = 0.1
WAIT_S = 40
DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
SCREENSHOT = "consumer-groups.png"
HOSTILE = '<img src=x onerror="window.__pwned=1">'
# librdkafka's own log lines ("%4|1795...|FAIL|rdkafka#consumer-1| ...") on stdout or stderr
CLIENT_LOG_LINE = re.compile(r"^%\d\|\d+\.\d+\||rdkafka#", re.MULTILINE)


class Member:
    """A confluent-kafka consumer of the consumer group protocol, polling in its own thread
    (one thread drives a consumer); ``hold()`` stops its polls, so it cannot revoke."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        self.consumer = Consumer({
            **kafka_conf(bootstrap), "group.id": group, "group.protocol": "consumer",
            "client.id": client_id, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
            "logger": CLIENT_LOG,  # the package's quiet logger: no librdkafka lines in output
        })
        self.owned: set[int] = set()
        self._held = threading.Event()
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _on_assign(self, _consumer, partitions) -> None:
        self.owned |= {p.partition for p in partitions}  # KIP-848: always incremental

    def _on_revoke(self, _consumer, partitions) -> None:
        self.owned -= {p.partition for p in partitions}

    def hold(self) -> None:
        self._held.set()

    def release(self) -> None:
        self._held.clear()

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self._held.is_set():
                time.sleep(POLL_S)
            else:
                self.consumer.poll(POLL_S)
        self.consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)


@pytest.fixture
def topic(cluster) -> str:
    name = f"cg-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, partitions=PARTITIONS)  # quiet clients
    return name


@pytest.fixture
def members(cluster):
    """Start members with ``members(group, topic, client_id)``; all closed after the test."""
    started: list[Member] = []

    def start(group: str, topic: str, client_id: str) -> Member:
        started.append(Member(cluster.bootstrap_servers, group, topic, client_id))
        return started[-1]

    yield start
    for member in started:
        member.release()
        member.close()


def consumer_group(cluster, group: str) -> dict | None:
    return next((g for g in cluster.groups() if g["group"] == group), None)


def stable_split(cluster, group: str, members: list[Member]):
    """The group's admin row once it is Stable with every member owning 2 of the 4 partitions,
    as the members themselves see it too."""
    row = consumer_group(cluster, group)
    if row is None or row["state"] != "Stable" or len(row["members"]) != len(members):
        return None
    owned = sorted(sorted(p for ps in m["assignment"].values() for p in ps)
                   for m in row["members"])
    mine = sorted(sorted(m.owned) for m in members)
    return row if owned == mine and [len(o) for o in owned] == [2, 2] else None


def two_members(cluster, members, group: str, topic: str) -> dict:
    first = members(group, topic, "c0")
    wait_for(lambda: (row := consumer_group(cluster, group)) and row["state"] == "Stable"
             and len(first.owned) == PARTITIONS, "the first member to own every partition",
             WAIT_S)
    second = members(group, topic, "c1")
    return wait_for(lambda: stable_split(cluster, group, [first, second]),
                    "two members to split four partitions 2+2", WAIT_S)


# == the admin endpoint and the client functions ================================================


def test_the_admin_endpoint_serves_consumer_groups_with_their_epochs(cluster, members, topic):
    group = f"g-{topic}"
    classic = f"classic-{topic}"
    commit_classic(cluster.bootstrap_servers, classic, topic)
    row = two_members(cluster, members, group, topic)

    assert row["group_type"] == "consumer" and row["coordinator"] == 1
    assert (row["group_epoch"], row["assignment_epoch"]) == (2, 2)  # two joins, one target each
    assert row["assignor"] == row["protocol"] == "uniform" and row["generation"] is None
    by_client = {m["client_id"]: m for m in row["members"]}
    assert sorted(by_client) == ["c0", "c1"]
    for member in by_client.values():
        assert member["member_epoch"] == 2 and member["member_state"] == "stable"
        assert member["target_assignment"] == member["assignment"]
        assert member["pending_revocation"] == {} and member["unreleased_partitions"] == {}
        assert member["subscribed_topic_names"] == [topic]
        assert member["client_host"] == "/127.0.0.1" and member["group_instance_id"] is None
    split = sorted(p for m in by_client.values() for p in m["assignment"][topic])
    assert split == list(range(PARTITIONS))
    [old] = [g for g in cluster.groups() if g["group"] == classic]
    assert old["group_type"] == "classic" and old["generation"] == 0  # the classic fields stay


def test_groups_frame_and_members_frame_show_type_epochs_and_the_target(cluster, members, topic):
    group = f"g-{topic}"
    classic = f"classic-{topic}"
    commit_classic(cluster.bootstrap_servers, classic, topic)
    two_members(cluster, members, group, topic)

    listed = groups_frame(cluster).set_index("group")
    assert list(groups_frame(cluster).columns) == GROUP_COLUMNS
    assert listed.loc[group, ["type", "state", "protocol", "members", "coordinator",
                              "group_epoch", "assignment_epoch"]].tolist() == [
        "consumer", "Stable", "uniform", 2, 1, 2, 2]
    assert listed.loc[classic, "type"] == "classic"
    assert pd.isna(listed.loc[classic, "group_epoch"])

    frame = members_frame(cluster, group)
    assert list(frame.columns) == MEMBER_COLUMNS
    assert frame.client_id.tolist() == ["c0", "c1"]
    assert frame.type.tolist() == ["consumer"] * 2
    assert frame.member_epoch.tolist() == [2, 2] and frame.member_state.tolist() == ["stable"] * 2
    assert (frame.assignment == frame.target_assignment).all()
    owned = [a.removeprefix(f"{topic}:").split(",") for a in frame.assignment]
    assert [len(o) for o in owned] == [2, 2] and sorted(sum(owned, [])) == ["0", "1", "2", "3"]
    assert frame.pending_revocation.tolist() == ["", ""]
    assert frame.subscription.tolist() == [topic, topic]
    # Outside a LocalCluster the admin API alone: the type, assignments and targets, no epochs.
    remote = members_frame(cluster.bootstrap_servers, group)
    assert remote.type.tolist() == ["consumer"] * 2 and remote.member_epoch.isna().all()
    assert remote.target_assignment.tolist() == frame.target_assignment.tolist()


def test_a_member_that_has_not_revoked_yet_is_shown_revoking_and_the_other_waiting(
        cluster, members, topic):
    """Mid-rebalance: c0 keeps polling held, so it cannot give up what c1 is to own."""
    group = f"g-{topic}"
    first = members(group, topic, "c0")
    wait_for(lambda: len(first.owned) == PARTITIONS, "c0 to own every partition", WAIT_S)
    first.hold()
    members(group, topic, "c1")
    row = wait_for(lambda: revoking(cluster, group), "c0 to be told to revoke", WAIT_S)

    by_client = {m["client_id"]: m for m in row["members"]}
    c0, c1 = by_client["c0"], by_client["c1"]
    assert row["state"] == "Reconciling" and (row["group_epoch"], row["assignment_epoch"]) == (2, 2)
    assert (c0["member_epoch"], c0["member_state"]) == (1, "unrevoked_partitions")
    assert (c1["member_epoch"], c1["member_state"]) == (2, "unreleased_partitions")
    assert c0["pending_revocation"] == c1["target_assignment"] == c1["unreleased_partitions"]
    assert c1["assignment"] == {}

    frame = members_frame(cluster, group).set_index("client_id")
    assert frame.loc["c0", "pending_revocation"] != "" and frame.loc["c0", "member_epoch"] == 1
    assert frame.loc["c1", "unreleased_partitions"] == frame.loc["c0", "pending_revocation"]
    assert frame.loc["c1", "target_assignment"] == frame.loc["c0", "pending_revocation"]


def revoking(cluster, group: str) -> dict | None:
    row = consumer_group(cluster, group)
    states = sorted(m["member_state"] for m in (row or {}).get("members", []))
    return row if states == ["unreleased_partitions", "unrevoked_partitions"] else None


def commit_classic(bootstrap: str, group: str, topic: str) -> None:
    """A classic group with one committed offset and no members."""
    from confluent_kafka import TopicPartition

    consumer = Consumer({**kafka_conf(bootstrap), "group.id": group,
                         "logger": CLIENT_LOG})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()


# == the magics ===================================================================================


@pytest.fixture
def shell(cluster):
    """IPython with the magics, acting on the module's cluster (not stopped here)."""
    ipython = InteractiveShell.instance()
    if "LogMagics" not in ipython.magics_manager.registry:
        ipython.run_line_magic("load_ext", "pylog_nb")
    magics = ipython.magics_manager.registry["LogMagics"]
    saved = magics.cluster, magics.bootstrap
    magics.cluster, magics.bootstrap = cluster, None
    yield ipython
    magics.cluster, magics.bootstrap = saved


def test_log_consume_with_the_consumer_protocol_and_log_groups(shell, cluster, members, topic,
                                                               capfd):
    produce(cluster.bootstrap_servers, topic, [(None, f"r{n}") for n in range(8)])
    group = f"reader-{topic}"
    read = shell.run_line_magic("log_consume", f"{topic} --group {group} --protocol consumer")
    assert sorted(read.value) == sorted(f"r{n}" for n in range(8))
    listed = shell.run_line_magic("log_groups", "").set_index("group")
    assert listed.loc[group, ["type", "state", "members"]].tolist() == ["consumer", "Empty", 0]
    lag = shell.run_line_magic("log_lag", group)
    assert lag.committed_offset.sum() == 8 and lag.lag.sum() == 0  # committed, epoch-checked

    live = f"g-{topic}"
    two_members(cluster, members, live, topic)
    detail = shell.run_line_magic("log_groups", live)
    assert detail.type.tolist() == ["consumer"] * 2
    assert detail.member_epoch.tolist() == [2, 2]
    assert sorted(detail.target_assignment.str.count(",")) == [1, 1]  # 2+2: "t:0,1", "t:2,3"
    assert (detail.pending_revocation == "").all()
    printed = capfd.readouterr()
    assert f"{live}" in printed.out and "consumer" in printed.out  # the group's row, shown
    assert not CLIENT_LOG_LINE.search(printed.out + printed.err), printed


def test_log_consume_refuses_a_protocol_without_a_group(shell, topic):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="name a group"):
        shell.run_line_magic("log_consume", f"{topic} --protocol consumer")
    with pytest.raises(UsageError, match="choose it with the consumer protocol"):
        shell.run_line_magic("log_consume", f"{topic} -g g --assignor range")


# == the timeline's steps, from snapshots of the real cluster ======================================


@pytest.fixture
def own_cluster(tmp_path):
    """A cluster of its own: the view shows this test's topic alone."""
    with LocalCluster(brokers=1, data_dir=tmp_path / "cluster") as running:
        yield running


def test_each_step_of_an_incremental_rebalance_is_marked_on_the_timeline(own_cluster, browser,
                                                                         shots):
    cluster = own_cluster
    topic = "orders"
    create_topic(cluster.bootstrap_servers, topic, partitions=PARTITIONS)
    produce(cluster.bootstrap_servers, topic, [(f"order-{n}", "paid") for n in range(40)])
    group = "billing"
    recorder = Recorder(cluster, wait_s=WAIT_S, poll_s=0.2)
    first = Member(cluster.bootstrap_servers, group, topic, "c0")
    second = None
    try:
        recorder.until(lambda s: joined(s, group, ["c0"]), "c0 alone, stable")
        first.hold()
        second = Member(cluster.bootstrap_servers, group, topic, "c1")
        rebalance_marked(recorder, first, group, topic, browser, shots)
    finally:
        first.release()
        for member in (first, second):
            if member is not None:
                member.close()


def rebalance_marked(recorder, first: Member, group: str, topic: str, browser, shots) -> None:
    during = recorder.until(lambda s: member_states(s, group) == [
        "unreleased_partitions", "unrevoked_partitions"], "c0 revoking, c1 waiting")
    first.release()
    after = recorder.until(lambda s: joined(s, group, ["c0", "c1"]), "c0 and c1 stable 2+2")

    texts = [m["text"] for m in recorder.history.timeline()["marks"] if m["category"] == "group"]
    c0 = member_name(after, group, "c0")
    c1 = member_name(after, group, "c1")
    expected = [
        f"group {group}: group epoch 1 -> 2 ({c1} joined)",
        f"group {group}: target assignment computed for epoch 2 by the uniform assignor",
        f"group {group}: {c0} must revoke {topic}:",
        f"group {group}: {c1} caught up to epoch 2, owns nothing; waits for {topic}:",
        f"group {group}: {c0} revoked {topic}:",
        f"group {group}: {c0} caught up to epoch 2, owns {topic}:",
        f"group {group}: {c1} got {topic}:",
        f"group {group} Reconciling -> Stable",
    ]
    for text in expected:
        assert any(t.startswith(text) for t in texts), (text, texts)
    order = [next(i for i, t in enumerate(texts) if t.startswith(text)) for text in expected]
    assert order[:3] == sorted(order[:3]) and order[4] < order[6], texts

    page = recorder.show(browser, during)
    try:
        panel = page.locator(f'.pylog-cg[data-group="{group}"]')
        expect(panel.locator(".pylog-cg-head")).to_contain_text("Reconciling")
        expect(panel.locator('.pylog-cg-epoch.group[data-epoch="2"]')).to_contain_text(
            "group epoch 2")
        expect(panel.locator('.pylog-cg-epoch.assignment[data-epoch="2"]')).to_contain_text(
            "assignment epoch 2")
        revoker = panel.locator('tr[data-client="c0"]')
        expect(revoker.locator(".pylog-cg-member-epoch")).to_contain_text(
            "1 behind the assignment epoch")
        expect(revoker.locator(".pylog-cg-mstate")).to_contain_text("revoking")
        expect(revoker.locator('.pylog-cg-p[data-kind="revoking"]')).to_have_count(2)
        expect(revoker.locator('.pylog-cg-p[data-kind="owned"]')).to_have_count(2)
        waiter = panel.locator('tr[data-client="c1"]')
        expect(waiter.locator(".pylog-cg-member-epoch")).to_contain_text("= assignment epoch")
        expect(waiter.locator(".pylog-cg-mstate")).to_contain_text("waiting for release")
        expect(waiter.locator('.pylog-cg-p[data-kind="unreleased"]')).to_have_count(2)
        revoked = sorted(revoker.locator('.pylog-cg-p[data-kind="revoking"]').evaluate_all(
            "chips => chips.map((c) => c.dataset.partition)"))
        waited = sorted(waiter.locator('.pylog-cg-p[data-kind="unreleased"]').evaluate_all(
            "chips => chips.map((c) => c.dataset.partition)"))
        assert revoked == waited  # what c0 must give up is what c1 waits for
        strip = page.locator(".pylog-strip-svg .pylog-mark.cat-group")
        expect(strip.first).to_be_attached()
        assert page.locator(".pylog-view").evaluate(view_page.MISSING_GLYPHS_JS) == []
        picture(page, shots)
    finally:
        page.close()

    page = recorder.show(browser, after)
    try:
        panel = page.locator(f'.pylog-cg[data-group="{group}"]')
        expect(panel.locator(".pylog-cg-head")).to_contain_text("Stable")
        for client in ("c0", "c1"):
            row = panel.locator(f'tr[data-client="{client}"]')
            expect(row.locator('.pylog-cg-p[data-kind="owned"]')).to_have_count(2)
            expect(row.locator(".pylog-cg-p:not(.owned)")).to_have_count(0)
            expect(row.locator(".pylog-cg-member-epoch")).to_contain_text("= assignment epoch")
        page.screenshot(path=str(shots / "consumer-group-stable.png"), full_page=True)
    finally:
        page.close()


def panel_of(snapshot: dict, group: str) -> dict | None:
    return next((g for g in snapshot["groups"] if g["group"] == group), None)


def joined(snapshot: dict, group: str, clients: list[str]) -> bool:
    g = panel_of(snapshot, group)
    return bool(g) and g["state"] == "Stable" and sorted(
        m["client_id"] for m in g["consumer_members"]) == clients


def member_states(snapshot: dict, group: str) -> list[str]:
    g = panel_of(snapshot, group) or {"consumer_members": []}
    return sorted(m["member_state"] for m in g["consumer_members"])


def member_name(snapshot: dict, group: str, client_id: str) -> str:
    [m] = [m for m in panel_of(snapshot, group)["consumer_members"]
           if m["client_id"] == client_id]
    return f"member {client_id} ({m['member_id'][:8]})"


def picture(page, shots: Path) -> None:
    """The view down to its groups: the timeline with the rebalance's marks, the panel."""
    view = page.locator(".pylog-view")
    box = view.bounding_box()
    groups = page.locator(".pylog-section-groups").bounding_box()
    clip = {"x": box["x"], "y": box["y"], "width": box["width"],
            "height": groups["y"] + groups["height"] - box["y"]}
    page.screenshot(path=str(shots / SCREENSHOT), clip=clip, full_page=True)
    if os.environ.get("PYLOG_DOCS_IMAGES") == "1":
        DOCS_IMAGES.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS_IMAGES / SCREENSHOT), clip=clip, full_page=True)


# == what the view says, without a cluster =========================================================


def consumer_member(client_id: str, member_id: str, epoch: int, state: str, **partitions) -> dict:
    return {"member_id": member_id, "client_id": client_id, "client_host": "/127.0.0.1",
            "instance_id": None, "member_epoch": epoch, "member_state": state,
            "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
            **{kind: partitions.get(kind, []) for kind in (
                "assignment", "pending_revocation", "target_assignment", "unreleased")}}


def consumer_group_entry(group: str, members: list[dict], *, state: str = "Reconciling",
                         group_epoch: int = 2, assignment_epoch: int = 2) -> dict:
    return {"group": group, "group_type": "consumer", "state": state, "generation": None,
            "coordinator": 1, "stale_coordinators": [], "disagreement": "",
            "members": [m["client_id"] for m in members], "offsets": [],
            "group_epoch": group_epoch, "assignment_epoch": assignment_epoch,
            "assignor": "uniform", "consumer_members": members}


def test_the_steps_between_two_snapshots_are_named_in_kafkas_order():
    """Revoked partitions are seen even when the request to revoke fell between snapshots."""
    old = consumer_group_entry("g", [consumer_member(
        "a", "A" * 22, 1, "stable", assignment=[["t", 0], ["t", 1]],
        target_assignment=[["t", 0], ["t", 1]])], state="Stable", group_epoch=1,
        assignment_epoch=1)
    new = consumer_group_entry("g", [
        consumer_member("a", "A" * 22, 2, "stable", assignment=[["t", 0]],
                        target_assignment=[["t", 0]]),
        consumer_member("b", "B" * 22, 2, "unreleased_partitions",
                        target_assignment=[["t", 1]])])
    steps = _rebalance_steps(old, new)
    assert [kind for kind, _text in steps] == [
        "group_epoch_bumped", "target_assignment_computed", "member_revoked", "member_caught_up",
        "member_caught_up", "consumer_group_state"]
    texts = [text for _kind, text in steps]
    assert texts[0] == "group g: group epoch 1 -> 2 (member b (BBBBBBBB) joined)"
    assert texts[1] == ("group g: target assignment computed for epoch 2 by the uniform "
                        "assignor: member a (AAAAAAAA) t:0; member b (BBBBBBBB) t:1")
    assert texts[2] == "group g: member a (AAAAAAAA) revoked t:1"
    assert texts[4] == "group g: member b (BBBBBBBB) caught up to epoch 2, owns nothing"
    assert texts[5] == "group g Stable -> Reconciling (group epoch 2, assignment epoch 2)"
    assert _rebalance_steps(new, new) == []


def test_client_text_in_a_consumer_group_stays_text(browser):
    member = consumer_member(HOSTILE, HOSTILE + "x" * 10, 1, "unrevoked_partitions",
                             assignment=[[HOSTILE, 0]], pending_revocation=[[HOSTILE, 1]])
    member["subscribed_topic_regex"] = HOSTILE
    member["instance_id"] = HOSTILE
    shown = hostile_snapshot(consumer_group_entry(HOSTILE, [member]))
    page = view_page.show(browser, shown, taken_ms=1_800_000_000_000)
    try:
        panel = page.locator(".pylog-cg")
        expect(panel).to_contain_text(HOSTILE)
        expect(panel.locator('.pylog-cg-p[data-kind="revoking"]')).to_have_text(f"↩ {HOSTILE}-1")
        expect(page.locator("img")).to_have_count(0)
        assert page.evaluate("typeof window.__pwned") == "undefined"
    finally:
        page.close()
    html = render_groups(shown)
    assert HOSTILE not in html and "&lt;img src=x" in html


def test_a_classic_group_keeps_its_table_beside_a_consumer_group(browser):
    classic = {"group": "old", "group_type": "classic", "state": "Stable", "generation": 3,
               "coordinator": 1, "stale_coordinators": [], "disagreement": "",
               "members": ["k1"], "offsets": [{"topic": "t", "partition": 0, "committed": 4,
                                               "lag": 1}]}
    new = consumer_group_entry("new", [consumer_member(
        "c0", "C" * 22, 2, "stable", assignment=[["t", 0]], target_assignment=[["t", 0]])],
        state="Stable")
    page = view_page.show(browser, hostile_snapshot(classic, new), taken_ms=1_800_000_000_000)
    try:
        table = page.locator(".pylog-groups > table.pylog-table")
        expect(table.locator("thead th")).to_have_text(
            ["group", "state", "generation", "coordinator", "members", "committed (lag)",
             "total lag over time"])
        expect(table.locator('tr[data-group="old"]')).to_contain_text("t-0: 4 (lag 1)")
        expect(table.locator('tr[data-group="new"]')).to_have_count(0)
        expect(page.locator('.pylog-cg[data-group="new"]')).to_contain_text("consumer protocol")
    finally:
        page.close()


def hostile_snapshot(*groups: dict) -> dict:
    partition = view_page.partition("t", 0, leader=1, epoch=0, isr=[1], replicas={
        1: view_page.replica("leader", 0, 5)})
    shown = view_page.snapshot({1: "up"}, [partition])
    shown["groups"] = list(groups)
    return shown


# == the browser ===================================================================================


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, for the module."""
    with headless_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def shots(tmp_path_factory, browser) -> Path:
    """Where the screenshots go (printed)."""
    where = tmp_path_factory.mktemp("consumer-group-shots")
    print(f"consumer group screenshots in {where}")
    return where

