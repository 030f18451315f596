"""Share groups (KIP-932) as the notebook shows them: the admin endpoint's JSON
(``/v1/groups``, ``/v1/share_partitions``), the client's frames, ``%log_groups`` and
``%log_consume --share``, and the live view's share-group panel and timeline, against a real
broker process and real confluent-kafka ``ShareConsumer`` members.

Every member here acknowledges explicitly, so a test decides what becomes of each record:
RELEASE (back to the group, delivered again with a higher delivery count), REJECT (archived),
ACCEPT (acknowledged), or nothing (it stays acquired until the member's lock runs out or the
member leaves). A record at the head of the share partition that stays acquired keeps every
settled record after it in flight (the start offset stops at it), so the cells of all four states
can be seen at once.

The view is drawn on a bare page (``support.view_page``: the real ES module and CSS in
Chromium, Debian's ``/usr/bin/chromium``) from snapshots taken of the real cluster.
``PYLOG_DOCS_IMAGES=1`` also writes the picture docs/view.md shows,
``docs/images/share-groups.png``; otherwise screenshots go to a temporary directory (printed).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from support import view_page
from support.clients import kafka_conf, wait_for
from support.lab import headless_chromium
from support.view_recorder import Recorder

from pylog_nb import LocalCluster
from pylog_nb.client import (
    groups_frame,
    members_frame,
    share_groups_frame,
    share_partitions_frame,
    share_records_frame,
)
from pylog_nb.client.config import CLIENT_LOG
from pylog_nb.client.groups import GROUP_COLUMNS, MEMBER_COLUMNS
from pylog_nb.client.io import consume, create_topic, produce
from pylog_nb.client.share_consume import SHARE_COLUMNS
from pylog_nb.client.shares import (
    SHARE_GROUP_COLUMNS,
    SHARE_PARTITION_COLUMNS,
    SHARE_RECORD_COLUMNS,
)
from pylog_nb.widgets.render import render_groups
from pylog_nb.widgets.snapshot import _share_steps

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture fails with how to install it (lab.missing_browser)
    expect = None

LOCK_MS = 3_000  # group.share.record.lock.duration.ms (Kafka's 30 s would slow every test)
VIEW_LOCK_MS = 5_000  # the view test's: a member holds the head while the others act
# Between the head's acquisition and the others': their locks run out this much later, so the
# snapshot that sees the head's lock run out still sees them held.
HOLD_GAP_S = 1.5
DELIVERY_LIMIT = 3  # group.share.delivery.count.limit (Kafka's default: 5)
BROKER_ARGS = ("--share-auto-offset-reset", "earliest",
               "--group-share-record-lock-duration-ms", str(LOCK_MS),
               "--group-share-delivery-count-limit", str(DELIVERY_LIMIT))
WAIT_S = 30
POLL_S = 0.2
DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
SCREENSHOT = "share-groups.png"
HOSTILE = '<img src=x onerror="window.__pwned=1">'
# librdkafka's own log lines ("%4|1795...|SHARECONSUMER|rdkafka#consumer-1| ... "Preview" ...)
CLIENT_LOG_LINE = re.compile(r"^%\d\|\d+\.\d+\||rdkafka#|Preview", re.MULTILINE)
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One broker whose share groups start at the earliest offset, with a short lock."""
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("share-view"),
                      broker_args=BROKER_ARGS) as running:
        yield running


@pytest.fixture
def topic(cluster) -> str:
    """A one-partition topic of six records: every member of a share group reads it."""
    name = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, name, partitions=1)
    produce(cluster.bootstrap_servers, name, [(None, f"job-{n}") for n in range(6)], partition=0)
    return name


def member(bootstrap: str, group: str, topic: str, client_id: str,
           max_records: int | None = None) -> ShareConsumer:
    """A share group member that acknowledges explicitly, quiet (the package's logger)."""
    settings = {**kafka_conf(bootstrap), "group.id": group, "client.id": client_id,
                "share.acknowledgement.mode": "explicit", "logger": CLIENT_LOG}
    if max_records is not None:
        settings["max.poll.records"] = max_records
    consumer = ShareConsumer(settings)
    consumer.subscribe([topic])
    return consumer


def handed(consumer: ShareConsumer) -> list:
    """The records of the first poll that brings any (a member must acknowledge them all
    before it polls again)."""
    got: list = []

    def poll() -> bool:
        got.extend(m for m in consumer.poll(POLL_S) if m.error() is None)
        return bool(got)

    wait_for(poll, "records for the member", WAIT_S, poll_s=0)
    return got


def acknowledge(consumer: ShareConsumer, messages: list, kinds: dict[int, AcknowledgeType]
                ) -> None:
    """Acknowledge each message as ``kinds`` says by offset (ACCEPT otherwise) and commit."""
    for message in messages:
        consumer.acknowledge(message, kinds.get(message.offset(), ACCEPT))
    consumer.commit_sync()


def get_json(cluster, path: str):
    [url] = cluster.admin_urls().values()
    return cluster.admin_get(f"{url}{path}", 5)


def share_partition(cluster, group: str) -> dict:
    [row] = [p for p in get_json(cluster, "/v1/share_partitions") if p["group"] == group]
    return row


# == the admin endpoint and the client's frames ===================================================


def test_the_admin_endpoint_and_the_frames_show_released_rejected_and_accepted_records(
        cluster, topic):
    group = f"sg-{topic}"
    worker = member(cluster.bootstrap_servers, group, topic, "worker")
    try:
        got = handed(worker)
        assert [(m.offset(), m.delivery_count()) for m in got] == [(n, 1) for n in range(6)]
        for message in got[:3]:  # 3, 4 and 5 stay acquired: nothing acknowledges them
            worker.acknowledge(message, {0: RELEASE, 1: REJECT, 2: ACCEPT}[message.offset()])
        acked_ms = int(time.time() * 1000)
        worker.commit_sync()
        [row] = [g for g in cluster.groups() if g["group"] == group]
        share = share_partition(cluster, group)
        frames = (share_groups_frame(cluster), share_partitions_frame(cluster, group),
                  share_records_frame(cluster, group), groups_frame(cluster),
                  members_frame(cluster, group))
    finally:
        worker.close()

    # /v1/groups: the share group, its epochs, its member and what it reads
    assert (row["group_type"], row["state"], row["protocol"], row["assignor"]) == (
        "share", "Stable", "simple", "simple")
    assert (row["group_epoch"], row["assignment_epoch"], row["generation"]) == (1, 1, None)
    [m] = row["members"]
    assert (m["client_id"], m["member_epoch"], m["assignment"]) == ("worker", 1, {topic: [0]})
    assert m["subscribed_topic_names"] == [topic] and row["offsets"] == []
    # /v1/share_partitions: the cells of one share partition at its leader
    assert (share["topic"], share["partition"], share["start_offset"], share["end_offset"]) == (
        topic, 0, 0, 6)
    assert (share["delivery_count_limit"], share["record_lock_duration_ms"]) == (
        DELIVERY_LIMIT, LOCK_MS)
    assert share["counts"] == {"available": 1, "acquired": 3, "acknowledged": 1, "archived": 1}
    assert share["in_flight_records"] == 6 and share["records_beyond"] == 0
    records = share["records"]
    assert [(r["offset"], r["state"], r["delivery_count"]) for r in records] == [
        (0, "available", 1), (1, "archived", 1), (2, "acknowledged", 1),
        (3, "acquired", 1), (4, "acquired", 1), (5, "acquired", 1)]
    assert {r["member_id"] for r in records[3:]} == {m["member_id"]}
    assert all(r["member_id"] is None and r["lock_deadline_ms"] is None for r in records[:3])
    for r in records[3:]:  # locked from the fetch, for the lock duration
        assert acked_ms - WAIT_S * 1000 < r["lock_deadline_ms"] <= acked_ms + LOCK_MS
    assert share["members_with_sessions"] == [m["member_id"]]

    shares, partitions, cells, listed, members = frames
    assert list(shares.columns) == SHARE_GROUP_COLUMNS
    mine = shares.set_index("group").loc[group]
    assert mine[["state", "members", "coordinator", "group_epoch", "assignment_epoch",
                 "partitions", "lag", "available", "acquired", "acknowledged",
                 "archived"]].tolist() == ["Stable", 1, 1, 1, 1, 1, 4, 1, 3, 1, 1]
    assert list(partitions.columns) == SHARE_PARTITION_COLUMNS
    assert partitions[["topic", "partition", "leader", "start_offset", "end_offset",
                       "high_watermark", "lag", "in_flight"]].values.tolist() == [
        [topic, 0, 1, 0, 6, 6, 4, 6]]
    assert list(cells.columns) == SHARE_RECORD_COLUMNS
    assert cells[["offset", "state", "delivery_count"]].values.tolist() == [
        [0, "available", 1], [1, "archived", 1], [2, "acknowledged", 1],
        [3, "acquired", 1], [4, "acquired", 1], [5, "acquired", 1]]
    assert cells.client_id.tolist()[3:] == ["worker"] * 3 and cells.client_id[:3].isna().all()
    assert cells.lock_deadline[:3].isna().all() and cells.lock_deadline[3:].notna().all()
    assert list(listed.columns) == GROUP_COLUMNS
    assert listed.set_index("group").loc[group, ["type", "state", "protocol", "members",
                                                 "group_epoch", "assignment_epoch"]].tolist() == [
        "share", "Stable", "simple", 1, 1, 1]
    assert list(members.columns) == MEMBER_COLUMNS
    assert members[["type", "client_id", "member_epoch", "assignment", "target_assignment",
                    "subscription"]].values.tolist() == [
        ["share", "worker", 1, f"{topic}:0", f"{topic}:0", topic]]
    assert members.member_state.isna().all()

    # the member left holding 3-5: they went back, delivered once so far
    after = share_partition(cluster, group)
    assert [(r["offset"], r["state"], r["delivery_count"]) for r in after["records"]] == [
        (0, "available", 1), (1, "archived", 1), (2, "acknowledged", 1),
        (3, "available", 1), (4, "available", 1), (5, "available", 1)]
    assert after["members_with_sessions"] == []
    assert share_groups_frame(cluster, group).state.tolist() == ["Empty"]


def test_share_frames_refuse_an_unknown_group(cluster):
    with pytest.raises(ValueError, match="unknown share group 'nobody'"):
        share_records_frame(cluster, "nobody")
    with pytest.raises(ValueError, match="unknown share group"):
        share_partitions_frame(cluster, "nobody")


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


def test_log_consume_share_releases_rejects_and_accepts_with_delivery_counts(
        shell, cluster, topic, capfd):
    group = f"sg-{topic}"
    capfd.readouterr()
    first = shell.run_line_magic("log_consume", f"{topic} --share {group} --release 0:0 "
                                                f"--reject 0:1")
    assert list(first.columns) == SHARE_COLUMNS
    assert first[["offset", "value", "delivery_count", "acknowledgement"]].values.tolist() == [
        [0, "job-0", 1, "release"], [1, "job-1", 1, "reject"], [2, "job-2", 1, "accept"],
        [3, "job-3", 1, "accept"], [4, "job-4", 1, "accept"], [5, "job-5", 1, "accept"]]
    printed = capfd.readouterr()
    assert printed.out.splitlines()[-1].startswith(
        f"6 records of {topic} for share group {group}: 4 accepted, 1 released")
    assert "1 rejected (archived: never delivered again)" in printed.out
    assert not CLIENT_LOG_LINE.search(printed.out + printed.err), printed

    again = shell.run_line_magic("log_consume", f"{topic} --share {group}")
    assert again[["offset", "delivery_count", "acknowledgement"]].values.tolist() == [
        [0, 2, "accept"]]  # the released record, delivered a second time; 1 was archived
    printed = capfd.readouterr()
    assert f"1 record of {topic} for share group {group} (1 delivered before): 1 accepted" in (
        printed.out)
    cells = share_records_frame(cluster, group)
    assert cells.empty  # everything settled: the start offset moved past it all
    assert share_partitions_frame(cluster, group)[["start_offset", "end_offset", "lag"]
                                                  ].values.tolist() == [[6, 6, 0]]

    produce(cluster.bootstrap_servers, topic, [(None, "job-6"), (None, "job-7")], partition=0)
    every = shell.run_line_magic("log_consume", f"{topic} --share {group} --release")
    assert every[["offset", "acknowledgement"]].values.tolist() == [[6, "release"],
                                                                    [7, "release"]]
    assert "stopped after the poll that released a record" in capfd.readouterr().out
    named = shell.run_line_magic("log_consume", f"{topic} --share {group} -n 1 --reject 0:9")
    assert named[["offset", "delivery_count", "acknowledgement"]].values.tolist() == [
        [6, 2, "accept"]]  # one at a time (max.poll.records): 7 stays available
    assert "not handed to this read: 0:9" in capfd.readouterr().out
    assert share_records_frame(cluster, group)[["offset", "state", "delivery_count"]
                                               ].values.tolist() == [[7, "available", 1]]


def test_log_groups_lists_share_groups_and_shows_one_with_its_partitions(
        shell, cluster, topic, capfd):
    group = f"sg-{topic}"
    classic = f"classic-{topic}"
    consume(cluster.bootstrap_servers, topic, group=classic)
    worker = member(cluster.bootstrap_servers, group, topic, "worker")
    try:
        acknowledge(worker, handed(worker), {0: REJECT})
        listed = shell.run_line_magic("log_groups", "").set_index("group")
        assert listed.loc[group, ["type", "state", "protocol", "members", "group_epoch",
                                  "assignment_epoch"]].tolist() == ["share", "Stable", "simple",
                                                                    1, 1, 1]
        assert listed.loc[classic, "type"] == "classic"
        capfd.readouterr()
        with pd.option_context("display.width", 400, "display.max_columns", 40):
            detail = shell.run_line_magic("log_groups", group)
    finally:
        worker.close()
    assert detail[["type", "client_id", "member_epoch", "assignment"]].values.tolist() == [
        ["share", "worker", 1, f"{topic}:0"]]
    printed = capfd.readouterr().out
    assert "share" in printed and "simple" in printed  # the group's row, shown
    assert "start_offset" in printed and "acknowledged" in printed  # its share partitions
    assert not CLIENT_LOG_LINE.search(printed), printed


@pytest.mark.parametrize(("line", "says"), [
    ("{topic} --share g --release 3", "--release 3: name records as PARTITION:OFFSET"),
    ("{topic} --share g --reject 0:x", "--reject 0:x: name records as PARTITION:OFFSET"),
    ("{topic} --share g --release --reject", "both mean every record"),
    ("{topic} --share g --release 0:1 --reject 0:1", "named to release and to reject"),
    ("{topic} --release", "add --share GROUP"),
    ("{topic} --share g --group h", "--group does not go with --share"),
    ("{topic} --share g -p 0", "--partition does not go with --share"),
    ("{topic} --share g --from latest", "--from does not go with --share"),
    ("{topic} --share g -n 0", "at least one record"),
    ("nope-{topic} --share g", "topic nope-{topic} does not exist"),
    ("{topic} --share classic-{topic}", "group classic-{topic} is a classic group (empty)"),
])
def test_bad_share_reads_get_one_readable_line(shell, cluster, topic, line, says):
    consume(cluster.bootstrap_servers, topic, group=f"classic-{topic}")
    with pytest.raises(UsageError) as refused:
        shell.run_line_magic("log_consume", line.format(topic=topic))
    text = str(refused.value)
    assert says.format(topic=topic) in text and "\n" not in text, text


# == the view: cells, offsets, members and the timeline, from snapshots of the real cluster ======


@pytest.fixture
def own_cluster(tmp_path):
    """A cluster of its own: the view shows this test's topic alone, and a longer lock."""
    args = ("--share-auto-offset-reset", "earliest",
            "--group-share-record-lock-duration-ms", str(VIEW_LOCK_MS),
            "--group-share-delivery-count-limit", str(DELIVERY_LIMIT))
    with LocalCluster(brokers=1, data_dir=tmp_path / "cluster", broker_args=args) as running:
        yield running


def test_the_view_draws_each_record_by_state_and_marks_what_happened(own_cluster, browser,
                                                                     shots):
    """Four members share jobs-0: w2 holds the head (0-1) while w1 releases record 2 until the
    delivery limit archives it, rejects 3 and accepts the rest, w3 leaves holding 12-13, w1
    takes them back with 14-15, and w4 takes 16-17; then w2's lock runs out."""
    cluster = own_cluster
    boot = cluster.bootstrap_servers
    topic, group = "jobs", "workers"
    create_topic(boot, topic, partitions=1)
    produce(boot, topic, [(f"job-{n}", f"payload {n}") for n in range(30)], partition=0)
    recorder = Recorder(cluster, wait_s=WAIT_S, poll_s=0.1)
    recorder.take()
    started: list[ShareConsumer] = []

    def join(client_id: str, max_records: int) -> ShareConsumer:
        started.append(member(boot, group, topic, client_id, max_records))
        return started[-1]

    def offsets(messages) -> list[tuple[int, int]]:
        return [(m.offset(), m.delivery_count()) for m in messages]

    try:
        w2 = join("w2", 2)
        assert offsets(handed(w2)) == [(0, 1), (1, 1)]  # held to the end: never acknowledged
        recorder.take()
        time.sleep(HOLD_GAP_S)
        w1 = join("w1", 4)
        got = handed(w1)
        assert offsets(got) == [(2, 1), (3, 1), (4, 1), (5, 1)]
        recorder.take()  # each poll's records seen acquired: the marks can say by whom
        acknowledge(w1, got, {2: RELEASE, 3: REJECT})
        recorder.take()
        for count, new in ((2, [6, 7, 8]), (3, [9, 10, 11])):  # 2 first, then new ones
            got = handed(w1)
            assert offsets(got) == [(2, count)] + [(n, 1) for n in new]
            recorder.take()
            acknowledge(w1, got, {2: RELEASE})
            recorder.take()
        w3 = join("w3", 2)
        assert offsets(handed(w3)) == [(12, 1), (13, 1)]
        recorder.take()
        w3.close()  # leaves holding 12-13: they go back
        started.remove(w3)
        recorder.until(lambda s: cells_of(s, group).get(12, [None])[1] == "available",
                       "w3's records back")
        assert offsets(handed(w1)) == [(12, 2), (13, 2), (14, 1), (15, 1)]  # redeliveries first
        recorder.take()
        w4 = join("w4", 2)
        assert offsets(handed(w4)) == [(16, 1), (17, 1)]
        during = recorder.take()
        after = recorder.until(lambda s: cells_of(s, group).get(0, [None])[1] == "available",
                               "w2's lock to run out")
        shown_cells(after, group, w1, w4)
        marked(recorder, group)
        page = recorder.show(browser, after)
        try:
            view_checks(page, group, after)
            picture(page, shots)
        finally:
            page.close()
        page = recorder.show(browser, during)
        try:  # before w2's lock ran out: its colour on 0-1
            panel = page.locator(f'.pylog-sg[data-group="{group}"]')
            w2_id = member_id(during, group, "w2")
            expect(panel.locator(f'.pylog-sg-cell.state-acquired[data-member="{w2_id}"]')
                   ).to_have_count(2)
            page.screenshot(path=str(shots / "share-groups-before-expiry.png"), full_page=True)
        finally:
            page.close()
    finally:
        for consumer in started:
            consumer.close()


def shown_cells(snapshot: dict, group: str, w1, w4) -> None:
    """The last snapshot's cells: every state, the delivery counts, who holds what."""
    cells = cells_of(snapshot, group)
    w1_id, w4_id = member_id(snapshot, group, "w1"), member_id(snapshot, group, "w4")
    expected = {0: ["available", 1, None], 1: ["available", 1, None],
                2: ["archived", DELIVERY_LIMIT, None], 3: ["archived", 1, None],
                **{n: ["acknowledged", 1, None] for n in range(4, 12)},
                12: ["acquired", 2, w1_id], 13: ["acquired", 2, w1_id],
                14: ["acquired", 1, w1_id], 15: ["acquired", 1, w1_id],
                16: ["acquired", 1, w4_id], 17: ["acquired", 1, w4_id]}
    assert {o: c[1:4] for o, c in cells.items()} == expected
    [share] = group_of(snapshot, group)["share_partitions"]
    assert (share["start_offset"], share["end_offset"], share["high_watermark"]) == (0, 18, 30)
    assert share["counts"] == {"available": 2, "acquired": 6, "acknowledged": 8, "archived": 2}
    assert share["lag"] == 30 - 10  # neither acknowledged nor archived, below the HW


def marked(recorder: Recorder, group: str) -> None:
    """The timeline's share marks, in the order they happened."""
    texts = [m["text"] for m in recorder.history.timeline()["marks"] if m["category"] == "share"]
    snapshot = recorder.last
    assert snapshot is not None
    name = {c: f"member {c} ({member_id(snapshot, group, c)[:8]})" for c in ("w1", "w2", "w4")}
    where = f"share group {group}, jobs-0"
    expected = [
        f"share group {group}: {name['w2']} joined",
        f"share group {group}: {name['w1']} joined",
        f"{where}: record 2 came back to the group: released by {name['w1']}",
        f"{where}: record 3 archived: rejected by {name['w1']}",
        f"{where}: record 2 archived: delivered {DELIVERY_LIMIT} times, the delivery limit, "
        f"then {name['w1']} released or rejected it",
        f"share group {group}: member w3 (",  # joined, then left
        f"{where}: records 12-13 came back to the group: member w3 (",
        f"{where}: records 0-1 came back to the group: the lock of {name['w2']} ran out",
    ]
    for text in expected:
        assert any(t.startswith(text) for t in texts), (text, texts)
    order = [next(i for i, t in enumerate(texts) if t.startswith(text)) for text in expected]
    assert order == sorted(order), texts
    assert sum(t.endswith("left holding it") for t in texts) == 1, texts
    assert sum("released by" in t for t in texts) == 2, texts  # twice, then archived


def view_checks(page, group: str, shown: dict) -> None:
    panel = page.locator(f'.pylog-sg[data-group="{group}"]')
    expect(panel.locator(".pylog-cg-head")).to_contain_text("share group")
    expect(panel.locator(".pylog-cg-head")).to_contain_text("Stable")
    g = group_of(shown, group)
    expect(panel.locator(f'.pylog-cg-epoch.group[data-epoch="{g["group_epoch"]}"]')
           ).to_be_visible()
    share = panel.locator('.pylog-sgp[data-partition="jobs-0"]')
    expect(share).to_have_attribute("data-start", "0")
    expect(share).to_have_attribute("data-end", "18")
    expect(share.locator(".pylog-sg-tick.spso")).to_have_attribute("data-offset", "0")
    expect(share.locator(".pylog-sg-tick.speo")).to_have_attribute("data-offset", "18")
    expect(share.locator(".pylog-sg-tick.speo")).to_contain_text("SPEO 18")
    cells = share.locator(".pylog-sg-cell")
    expect(cells).to_have_count(18)
    drawn = cells.evaluate_all(
        "cells => cells.map((c) => [Number(c.dataset.offset), c.dataset.state, c.textContent, "
        "c.dataset.member, c.className])")
    states = {offset: (state, text) for offset, state, text, _m, _c in drawn}
    assert states[0] == ("available", "1") and states[2] == ("archived", str(DELIVERY_LIMIT))
    assert states[3] == ("archived", "1") and states[4] == ("acknowledged", "1")
    assert states[12] == ("acquired", "2") and states[16] == ("acquired", "1")
    assert "at-limit" in drawn[2][4] and "at-limit" not in drawn[3][4]
    w1, w4 = member_id(shown, group, "w1"), member_id(shown, group, "w4")
    colours = {offset: re.search(r"member-\d", cls).group() for offset, _s, _t, m, cls in drawn
               if m}
    assert {colours[n] for n in range(12, 16)} != {colours[16]} == {colours[17]}
    expect(cells.nth(12)).to_have_attribute("title", re.compile(
        r"offset 12: acquired by member w1 \(.{8}\), locked until \d\d:\d\d:\d\d\.\d{3}; "
        rf"delivery count 2 of {DELIVERY_LIMIT}"))
    expect(cells.nth(2)).to_have_attribute("title", re.compile(
        rf"delivered {DELIVERY_LIMIT} times, the delivery limit"))
    for client, held in (("w1", "4 records acquired"), ("w4", "2 records acquired"),
                         ("w2", "nothing acquired")):
        row = panel.locator(f'tr.pylog-sg-member[data-client="{client}"]')
        expect(row.locator(".pylog-sg-held")).to_contain_text(held)
        expect(row.locator(".pylog-cg-partitions")).to_contain_text("jobs-0")
    assert {w1, w4} <= {m for _o, _s, _t, m, _c in drawn}
    strip = page.locator(".pylog-strip-svg .pylog-mark.cat-share")
    expect(strip.first).to_be_attached()
    expect(page.locator(".pylog-section-shares")).to_be_visible()
    expect(page.locator(".pylog-section-groups")).to_contain_text("no consumer groups")
    assert page.locator(".pylog-view").evaluate(view_page.MISSING_GLYPHS_JS) == []


def group_of(snapshot: dict, group: str) -> dict:
    return next(g for g in snapshot["groups"] if g["group"] == group)


def cells_of(snapshot: dict, group: str) -> dict[int, list]:
    """Offset -> [offset, state, delivery count, member id, lock deadline] of the group's one
    share partition; empty before it has one."""
    found = [g for g in snapshot["groups"] if g["group"] == group]
    shares = found[0]["share_partitions"] if found else []
    return {r[0]: r for share in shares for r in share["records"]}


def member_id(snapshot: dict, group: str, client_id: str) -> str:
    [m] = [m for m in group_of(snapshot, group)["share_members"] if m["client_id"] == client_id]
    return m["member_id"]


def picture(page, shots: Path) -> None:
    """The view down to its share groups: the timeline with the marks, the panel."""
    view = page.locator(".pylog-view")
    box = view.bounding_box()
    shares = page.locator(".pylog-section-shares").bounding_box()
    clip = {"x": box["x"], "y": box["y"], "width": box["width"],
            "height": shares["y"] + shares["height"] - box["y"]}
    page.screenshot(path=str(shots / SCREENSHOT), clip=clip, full_page=True)
    if os.environ.get("PYLOG_DOCS_IMAGES") == "1":
        DOCS_IMAGES.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS_IMAGES / SCREENSHOT), clip=clip, full_page=True)


# == what the view says, without a cluster ========================================================


def share_entry(group: str, members: list[dict], records: list[list], *, start: int = 0,
                end: int | None = None, state: str = "Stable", epoch: int = 2) -> dict:
    end = start + len(records) if end is None else end
    counts = {s: sum(r[1] == s for r in records)
              for s in ("available", "acquired", "acknowledged", "archived")}
    return {"group": group, "group_type": "share", "state": state, "generation": None,
            "coordinator": 1, "stale_coordinators": [], "disagreement": "",
            "members": [m["client_id"] for m in members], "offsets": [],
            "group_epoch": epoch, "assignment_epoch": epoch, "assignor": "simple",
            "share_members": members,
            "share_partitions": [{
                "topic": "t", "partition": 0, "leader": 1, "start_offset": start,
                "end_offset": end, "log_start_offset": 0, "high_watermark": end + 4,
                "log_end_offset": end + 4, "lag": 0, "delivery_count_limit": 3,
                "record_lock_duration_ms": 2000, "in_flight": len(records), "counts": counts,
                "records": records, "records_beyond": 0}]}


def share_member(client_id: str, member_id: str, epoch: int = 2) -> dict:
    return {"member_id": member_id, "client_id": client_id, "client_host": "/127.0.0.1",
            "member_epoch": epoch, "assignment": [["t", 0]], "subscribed_topic_names": ["t"]}


def test_what_two_snapshots_tell_of_each_record():
    """Came back (member left, lock ran out, released), archived (rejected, at the limit, even
    when gone below the start offset), and nothing for an accepted record."""
    a, b = share_member("a", "A" * 22), share_member("b", "B" * 22)
    now_ms = 10_000
    old = share_entry("g", [a, b], [
        [0, "acquired", 1, "A" * 22, 20_000], [1, "acquired", 1, "B" * 22, 5_000],
        [2, "acquired", 1, "B" * 22, 20_000], [3, "acquired", 1, "B" * 22, 20_000],
        [4, "acquired", 3, "B" * 22, 5_000], [5, "acquired", 1, "B" * 22, 20_000]])
    new = share_entry("g", [b], [
        [0, "available", 1, None, None], [1, "available", 1, None, None],
        [2, "available", 1, None, None], [3, "archived", 1, None, None],
        [4, "archived", 3, None, None], [5, "acknowledged", 1, None, None]], epoch=3)
    texts = [text for _kind, _topic, text in _share_steps(old, new, now_ms)]
    assert texts == [
        "share group g: member a (AAAAAAAA) left (group epoch 3); what it held goes back to "
        "the group",
        "share group g, t-0: record 0 came back to the group: member a (AAAAAAAA) left holding "
        "it",
        "share group g, t-0: record 1 came back to the group: the lock of member b (BBBBBBBB) "
        "ran out",
        "share group g, t-0: record 2 came back to the group: released by member b (BBBBBBBB)",
        "share group g, t-0: record 3 archived: rejected by member b (BBBBBBBB)",
        "share group g, t-0: record 4 archived: delivered 3 times, the delivery limit, then "
        "the lock of member b (BBBBBBBB) ran out"]
    # settled and gone below the start offset: archived only when it went back at the limit
    gone = share_entry("g", [b], [], start=6, epoch=3)
    texts = [text for _kind, _topic, text in _share_steps(old, gone, now_ms)]
    assert [t for t in texts if "t-0" in t] == [
        "share group g, t-0: record 4 archived: delivered 3 times, the delivery limit, then "
        "the lock of member b (BBBBBBBB) ran out"]
    assert _share_steps(new, new, now_ms) == []


def test_client_text_in_a_share_group_stays_text(browser):
    hostile = share_member(HOSTILE, HOSTILE + "x" * 10)
    entry = share_entry(HOSTILE, [hostile], [[0, "acquired", 1, HOSTILE + "x" * 10, 1_800_000]])
    entry["share_partitions"][0]["topic"] = HOSTILE
    hostile["subscribed_topic_names"] = [HOSTILE]
    shown = hostile_snapshot(entry)
    page = view_page.show(browser, shown, taken_ms=1_800_000_000_000)
    try:
        panel = page.locator(".pylog-sg")
        expect(panel).to_contain_text(HOSTILE)
        expect(panel.locator(".pylog-sg-cell")).to_have_attribute("title", re.compile(
            re.escape(f"acquired by member {HOSTILE}")))
        expect(page.locator("img")).to_have_count(0)
        assert page.evaluate("typeof window.__pwned") == "undefined"
    finally:
        page.close()
    html = render_groups(shown)
    assert HOSTILE not in html and "&lt;img src=x" in html


def test_classic_and_consumer_groups_keep_their_rendering_beside_a_share_group(browser):
    classic = {"group": "old", "group_type": "classic", "state": "Stable", "generation": 3,
               "coordinator": 1, "stale_coordinators": [], "disagreement": "",
               "members": ["k1"], "offsets": [{"topic": "t", "partition": 0, "committed": 4,
                                               "lag": 1}]}
    share = share_entry("queue", [share_member("s1", "S" * 22)],
                        [[4, "available", 2, None, None], [5, "archived", 3, None, None]],
                        start=4, end=6)
    page = view_page.show(browser, hostile_snapshot(classic, share), taken_ms=1_800_000_000_000)
    try:
        table = page.locator(".pylog-groups > table.pylog-table")
        expect(table.locator("thead th")).to_have_text(
            ["group", "state", "generation", "coordinator", "members", "committed (lag)",
             "total lag over time"])
        expect(table.locator("tbody tr")).to_have_count(1)
        expect(table.locator('tr[data-group="old"]')).to_contain_text("t-0: 4 (lag 1)")
        expect(page.locator(".pylog-groups .pylog-sg")).to_have_count(0)
        cells = page.locator('.pylog-sg[data-group="queue"] .pylog-sg-cell')
        expect(cells).to_have_text(["2", "3"])
        expect(cells.nth(1)).to_have_class(re.compile(r"state-archived at-limit"))
    finally:
        page.close()
    no_share = view_page.show(browser, hostile_snapshot(classic), taken_ms=1_800_000_000_000)
    try:
        expect(no_share.locator(".pylog-section-shares")).to_be_hidden()
    finally:
        no_share.close()
    html = render_groups(hostile_snapshot(classic, share))
    assert html.count("<table") == 2 and "start offset 4, end offset 6" in html


def hostile_snapshot(*groups: dict) -> dict:
    partition = view_page.partition("t", 0, leader=1, epoch=0, isr=[1], replicas={
        1: view_page.replica("leader", 0, 10)})
    shown = view_page.snapshot({1: "up"}, [partition])
    shown["groups"] = list(groups)
    return shown


def test_the_share_frames_sum_what_every_broker_reports():
    """Kafka 4.1's lag: records from the SPSO up to the HW, neither acknowledged nor archived."""
    from pylog_nb.client.introspect import Authority, PartitionTruth
    from pylog_nb.client.shares import merge_share_partitions

    row = {"group": "g", "topic": "t", "partition": 0, "leader_epoch": 2, "start_offset": 3,
           "end_offset": 9, "counts": {"available": 1, "acquired": 2, "acknowledged": 2,
                                       "archived": 1}}
    stale = {**row, "leader_epoch": 1, "start_offset": 0}
    replicas = {1: [{"topic": "t", "partition": 0, "high_watermark": 12}],
                2: [{"topic": "t", "partition": 0, "high_watermark": 11}]}
    truth = Authority("controller", {("t", 0): PartitionTruth(1, 2, (1, 2), (1, 2))})
    [merged] = merge_share_partitions({1: [row], 2: [stale]}, replicas, truth)
    assert (merged["leader"], merged["start_offset"], merged["high_watermark"]) == (1, 3, 12)
    assert merged["lag"] == 12 - 3 - 3


# == the browser ===================================================================================


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, for the module."""
    with headless_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def shots(tmp_path_factory, browser) -> Path:
    """Where the screenshots go (printed)."""
    where = tmp_path_factory.mktemp("share-group-shots")
    print(f"share group screenshots in {where}")
    return where
