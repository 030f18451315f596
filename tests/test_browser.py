"""The live cluster view in a real browser: JupyterLab runs a notebook that starts a
three-broker cluster and shows ``%log_watch``; headless Chromium, driven by Playwright, reads
what the widget draws (broker nodes, replica bars, groups, timeline), kills the leader of a
partition from the view while a cell keeps the kernel busy (the click shows pending at once and
acts when the cell ends: the broker goes down and another replica leads), kills the active
controller by a click (another controller becomes active, the dead one stays drawn with what it
last said, its leadership marked stale), shows an open transaction's LSO mark below the HW and
its disappearance once the commit marker is written (while the view's kill holds the broker
down), draws a committed and an aborted transaction's markers on every replica, steps back in
the timeline, and checks that a hostile group id, and a hostile client id in the Clients
section, stay text. Screenshots of the view, in the light and the dark theme, are saved in the
test's temporary directory (the path is printed).

Chromium comes from Debian (``/usr/bin/chromium``) and Playwright from the ``test`` extra, both
installed by ``scripts/setup.sh``; without them this test fails, it never skips.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support import view_page, wire
from support.clients import kafka_conf
from support.lab import (
    CHROMIUM,
    KERNEL_IDLE,
    POLL_S,
    WAIT_MS,
    WAIT_S,
    bootstrap_of,
    missing_browser,
    run_all_cells,
    running_lab,
    write_notebook,
)
from support.txn import UNVERIFIED_BROKER_ARGS, TxnProducer, end_txn, partition_log, plain

from pylog_nb.client.txn import transaction

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the chromium fixture fails with how to install it (lab.missing_browser)
    expect = sync_playwright = None

NOTEBOOK = "view.ipynb"
TOPIC = "t"
HOSTILE_GROUP = '<img src=x onerror="window.__pwned=1">'
HOSTILE_CLIENT = '<img src=x onerror="window.__pwned=2">'  # a client id, in the Clients section
GO_FILE = "go"  # the last cell keeps the kernel busy until the test creates this file
MORE_RECORDS = 30  # written after the kill, in the new leader's epoch
WIDE = "wide"  # a topic of many partitions: the grid, the pages, the focus
WIDE_PARTITIONS = 100
COMPACTED = "facts"
TXN_TOPIC = "txn"  # one replica: its log is written to while its broker is down
MARKERS_TOPIC = "paid"  # a committed and an aborted transaction's markers on every replica
MARKERS_REPLICAS = 2  # one broker of three is down since the leader-kill test
VIEWPORT = {"width": 1400, "height": 2200}  # the whole view at once, for the screenshots


def notebook_cells(data_dir: Path, go: Path) -> list[str]:
    """Start three brokers, a topic with records on both partitions, a committed offset for a
    hostile group id, show the live view, then hold the kernel until ``go`` exists."""
    return [
        "%load_ext pylog_nb",
        # TxnProducer's transactions bypass the coordinator: see tests/txn.py.
        f"cluster = %log_cluster start --brokers 3 --data-dir {data_dir} "
        f'--broker-args "{" ".join(UNVERIFIED_BROKER_ARGS)}"',
        f"%log_topic create {TOPIC} -p 2 -r 3",
        "from pylog_nb.client.io import produce\n"
        f"produce(cluster.bootstrap_servers, {TOPIC!r}, [(f'key-{{i}}', 'x') for i in range(40)])",
        "from confluent_kafka import Consumer, TopicPartition\n"
        f'consumer = Consumer({{**cluster.client_config(), '
        f'"group.id": {HOSTILE_GROUP!r}}})\n'
        f"consumer.commit(offsets=[TopicPartition({TOPIC!r}, 0, 0)], asynchronous=False)\n"
        "consumer.close()",
        "view = %log_watch --refresh 0.5",
        "view",
        "import os, time  # a long cell: the kernel is busy while the test clicks\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.1)",
    ]


# -- JupyterLab (tests/support/lab.py starts and stops it) ---------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 whose root holds the notebook: (notebook URL, root)."""
    root = tmp_path_factory.mktemp("lab")
    write_notebook(root / NOTEBOOK, notebook_cells(root / "data", root / GO_FILE))
    with running_lab(root) as server:
        try:
            yield server.url(NOTEBOOK), root
        finally:
            (root / GO_FILE).touch()  # let the kernel go, whatever a test did


# -- the browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's Chromium and Playwright, or a failure saying where they come from."""
    if why := missing_browser():
        pytest.fail(why)
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium):
    """One headless Chromium for the module (Playwright's sync API runs one per thread)."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def page(browser, lab):
    """Chromium showing the notebook after every cell but the last (the busy one) ran."""
    url, _root = lab
    shown = browser.new_page(viewport=VIEWPORT)
    shown.set_default_timeout(WAIT_MS)
    shown.goto(url)
    run_all_cells(shown)
    yield shown
    shown.close()


@pytest.fixture(scope="module")
def view(page):
    """The ClusterView's root, once it shows all three brokers."""
    shown = page.locator(".pylog-view")
    try:
        expect(shown.locator(".pylog-node")).to_have_count(3, timeout=WAIT_MS)
    except AssertionError as error:
        outputs = page.locator(".jp-OutputArea").all_inner_texts()
        raise AssertionError(f"the view did not render; cell outputs: {outputs}") from error
    return shown


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where the screenshots go (printed, so a run's log says where to look)."""
    where = tmp_path_factory.mktemp("browser-artifacts")
    print(f"screenshots in {where}")
    return where


def shows(view, part, text: str) -> None:
    """Wait until ``part`` of the view contains ``text``; a timeout reports the whole view."""
    try:
        expect(part).to_contain_text(text, timeout=WAIT_MS)
    except AssertionError as error:
        raise AssertionError(f"{error}\nthe whole view:\n{view.inner_text()}") from error


def leader_of(view, partition: str) -> int:
    replica = view.locator(f'.pylog-partition[data-partition="{partition}"] '
                           ".pylog-replica.is-leader")
    expect(replica).to_have_count(1)
    return int(replica.get_attribute("data-broker"))


def test_view_draws_broker_nodes_and_replica_bars(view):
    for broker_id in (1, 2, 3):
        expect(view.locator(f'.pylog-node[data-broker="{broker_id}"]')).to_have_attribute(
            "data-state", "up")
    for partition in (f"{TOPIC}-0", f"{TOPIC}-1"):
        replicas = view.locator(f'.pylog-partition[data-partition="{partition}"] .pylog-replica')
        expect(replicas).to_have_count(3)
        expect(replicas.locator(".pylog-committed")).to_have_count(3)  # 40 records, committed
        expect(replicas.locator('.pylog-committed[data-epoch="0"]')).to_have_count(3)
    shows(view, view.locator(".pylog-section-timeline"), "Latest events")
    expect(view.locator(".pylog-legend")).to_contain_text("the leader the controller chose")
    expect(view.locator(".pylog-legend")).to_contain_text("leader-epoch cache")
    expect(view.locator(".pylog-legend")).to_contain_text("truncated")
    expect(view.locator(".pylog-fold")).to_contain_text("__consumer_offsets")
    # A laptop screen holds the brokers and the timeline at once; the legend waits folded.
    expect(view.locator("details.pylog-legend")).not_to_have_attribute("open", re.compile(".*"))
    controls = view.locator(".pylog-section-timeline .pylog-controls").bounding_box()
    assert controls["y"] + controls["height"] - view.bounding_box()["y"] <= FOLD_PX, controls


def test_untrusted_group_id_stays_text(page, view):
    shows(view, view.locator(".pylog-groups"), HOSTILE_GROUP)
    expect(view.locator("img")).to_have_count(0)
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_a_hostile_client_id_stays_text_in_the_clients_section(page, view, lab):
    """A client connected with markup for a client id: the Clients section names it, as text,
    under its principal; the brokers' own connections are one "brokers" line."""
    _url, root = lab
    producer = Producer({**kafka_conf(bootstrap_of(root / "data")), "client.id": HOSTILE_CLIENT,
                         "log_level": 0})
    producer.list_topics(timeout=WAIT_S)  # connected, and kept so while the view looks
    clients = view.locator(".pylog-clients")
    shows(view, clients.locator('tr[data-principal="User:admin"] .pylog-clients-ids'),
          HOSTILE_CLIENT)
    expect(clients.locator('tr[data-principal="brokers"]').first).to_contain_text("brokers")
    expect(view.locator("img")).to_have_count(0)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert producer.flush(WAIT_S) == 0


def test_a_hundred_partitions_read_as_a_grid_a_page_and_a_focus(page, view, lab, artifacts):
    """Past a dozen partitions every one is a cell of a health grid and the bars come a page
    at a time; the focus narrows them; a compacted topic's cleaned range is drawn with gaps;
    the traffic table shows what each broker moves. The focus is reset at the end."""
    _url, root = lab
    bootstrap = bootstrap_of(root / "data")
    create_topics(bootstrap, [NewTopic(WIDE, WIDE_PARTITIONS, 3), NewTopic(COMPACTED, 1, 3, config={
        "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01"})])
    producer = Producer({**kafka_conf(bootstrap), "acks": "all", "log_level": 0})
    for n in range(WIDE_PARTITIONS * 5):
        producer.produce(WIDE, f"v{n}", key=f"k{n}")
    for n in range(40):  # four keys, ten updates each: compaction leaves gaps
        producer.produce(COMPACTED, f"update-{n}" * 10, key=f"key-{n % 4}")
        producer.flush(WAIT_S)
    assert producer.flush(WAIT_S) == 0, "records not acknowledged"
    total = WIDE_PARTITIONS + 3  # with t-0, t-1 and the compacted topic's one
    expect(view.locator(".pylog-grid .pylog-cell")).to_have_count(total, timeout=WAIT_MS)
    expect(view.locator('.pylog-grid .pylog-cell[data-health="ok"]')).to_have_count(total)
    shows(view, view.locator(".pylog-overview-summary"), f"{total} partitions: {total} in sync")
    shows(view, view.locator(".pylog-pager"), f"in detail: 1–12 of {total}")
    expect(view.locator(".pylog-partition")).to_have_count(12)
    expect(view.locator(".pylog-traffic tr.pylog-total")).to_contain_text("records/s")
    gaps = view.locator(f'.pylog-partition[data-partition="{COMPACTED}-0"] .pylog-compaction-gap')
    expect(gaps.first).to_be_attached(timeout=WAIT_MS)  # the cleaner looks every 5 s
    assert int(gaps.first.get_attribute("data-kept")) < (
        int(gaps.first.get_attribute("data-to")) - int(gaps.first.get_attribute("data-from")))
    without_legend(page, view, artifacts / "hundred-partitions.png")
    view.locator("select.pylog-focus-topic").select_option(WIDE)
    view.locator("input.pylog-focus-partitions").fill("5-7, 42")
    expect(view.locator(".pylog-partition")).to_have_count(4)
    expect(view.locator(".pylog-grid .pylog-cell")).to_have_count(0)  # one page of 4: no grid
    expect(view.locator(f'.pylog-partition[data-partition="{WIDE}-42"]')).to_have_count(1)
    view.locator("input.pylog-focus-partitions").fill("5-")
    expect(view.locator("input.pylog-focus-partitions")).to_have_class(re.compile(r"\binvalid\b"))
    view.locator("input.pylog-focus-partitions").fill("")
    view.locator("input.pylog-focus-attention").check()
    shows(view, view.locator(".pylog-section-partitions"), "no partition matches the focus")
    view.locator("input.pylog-focus-attention").uncheck()
    view.locator("select.pylog-focus-topic").select_option("")
    expect(view.locator(".pylog-grid .pylog-cell")).to_have_count(total)


def without_legend(page, view, path: Path) -> None:
    """A screenshot of the view down to its legend (README images)."""
    box, legend = view.bounding_box(), view.locator(".pylog-legend").bounding_box()
    page.screenshot(path=str(path), clip={"x": box["x"], "y": box["y"], "width": box["width"],
                                          "height": legend["y"] - box["y"]})


def clipped(part, path: Path) -> None:
    """A screenshot of ``part`` of the view, which a redraw may replace at any moment (an
    element screenshot waits for it to be stable, and fails once it is detached)."""
    part.page.screenshot(path=str(path), clip=part.bounding_box())


def create_topics(bootstrap: str, topics: list) -> None:
    """Create ``topics``, again while the controller counts too few live brokers: on this
    shared 2-core machine a controller election (or a late heartbeat) leaves the new active
    controller without live brokers for a moment, as a real client would see and retry."""
    client = AdminClient({**kafka_conf(bootstrap), "log_level": 0})
    deadline = time.monotonic() + WAIT_S
    while topics:
        futures = client.create_topics(topics)
        retry = []
        for topic, future in zip(topics, futures.values(), strict=True):
            try:
                future.result(WAIT_S)
            except KafkaException as error:
                code = error.args[0].code()
                if code == KafkaError.TOPIC_ALREADY_EXISTS:  # created by an earlier attempt
                    continue
                if code != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                    raise
                retry.append(topic)
        topics = retry
        time.sleep(POLL_S if topics else 0)


def test_killing_the_leader_from_the_view_shows_pending_then_a_new_leader(page, view, lab,
                                                                         artifacts):
    _url, root = lab
    partition = f"{TOPIC}-0"
    old = leader_of(view, partition)
    node = view.locator(f'.pylog-node[data-broker="{old}"]')
    node.click()
    view.locator('button.pylog-action[data-action="kill"]').click()
    # The last cell still runs: the click is pending, shown at once, until the kernel is free.
    expect(node).to_have_class(re.compile(r"\bpending\b"))
    shows(view, view.locator(".pylog-actions"), f"kill broker {old}: pending")
    expect(node).to_have_attribute("data-state", "up")
    page.screenshot(path=str(artifacts / "pending.png"), full_page=True)
    # The busy kernel has not answered the view's hello: the view says why it may be silent.
    shows(view, view.locator(".pylog-head .pylog-no-kernel"), "a cell is running")
    (root / GO_FILE).touch()
    expect(node).to_have_attribute("data-state", "down", timeout=WAIT_MS)
    expect(view.locator(".pylog-no-kernel")).to_have_count(0)  # the free kernel answered
    shows(view, view.locator(".pylog-actions"), f"kill broker {old}: done")
    # Another replica leads, and the dead broker has left the ISR (data-isr: "3,2,1").
    shown = view.locator(f'.pylog-partition[data-partition="{partition}"]')
    expect(shown).to_have_attribute("data-leader", re.compile(rf"^(?!{old}$)[0-9]+$"))
    expect(shown).to_have_attribute("data-isr", re.compile(rf"^(?!.*\b{old}\b)[0-9,]+$"))
    new = int(shown.get_attribute("data-leader"))
    expect(shown.locator(f'.pylog-replica.is-leader[data-broker="{new}"]')).to_contain_text(
        f"★ {new}")
    expect(shown.locator(".pylog-replica.is-leader")).to_have_count(1)  # never two leaders
    old_row = view.locator(f'.pylog-partition[data-partition="{partition}"] '
                           f'.pylog-replica[data-broker="{old}"]')
    expect(old_row).to_have_class(re.compile(r"\blast-known\b"))
    expect(old_row).to_contain_text("last known")
    shows(view, view.locator(".pylog-events"), "leader")
    # Records written after the election: the new leader's log gains a range in the new epoch,
    # and the dead follower falls behind by exactly those records.
    produce_more(root, partition=0, count=MORE_RECORDS)
    new_row = shown.locator(f'.pylog-replica[data-broker="{new}"]')
    expect(new_row.locator(".pylog-committed")).to_have_count(2, timeout=WAIT_MS)
    # The dead broker's lag is unknown (it answers nothing); its bar ends where its log did.
    shows(view, old_row, "lag unknown")
    shows(view, old_row, "down since")
    expect(old_row).not_to_contain_text("acts as")
    assert int(new_row.get_attribute("data-leo")) - int(old_row.get_attribute("data-leo")) == (
        MORE_RECORDS)
    expect(view.locator(".pylog-spark").first).to_be_visible(timeout=WAIT_MS)
    expect(shown.locator(".pylog-uncommitted")).to_have_count(0)  # followers learnt the HW
    view.screenshot(path=str(artifacts / "after-kill.png"))
    view.locator("select.pylog-focus-topic").select_option(TOPIC)  # the election's story alone
    expect(view.locator(".pylog-partition")).to_have_count(2)
    without_legend(page, view, artifacts / "readme.png")
    view.locator("select.pylog-focus-topic").select_option("")
    view.locator('button.pylog-action[data-action="kill"]').click()
    shows(view, view.locator(".pylog-actions"), f"kill refused: broker {old} is already down")
    assert page.evaluate("typeof window.__pwned") == "undefined"


def produce_more(root: Path, partition: int, count: int) -> None:
    """Write ``count`` records to ``partition`` from the test, through the running brokers."""
    producer = Producer({**kafka_conf(bootstrap_of(root / "data")), "acks": "all",
                         "log_level": 0})
    for n in range(count):
        producer.produce(TOPIC, f"more-{n}", partition=partition)
    assert producer.flush(WAIT_S) == 0, "records not acknowledged"


def test_an_open_transaction_shows_the_lso_until_its_marker_is_written(page, view, lab,
                                                                       artifacts):
    """Needs the kernel free (the view's buttons act only then): after the leader kill test."""
    _url, root = lab
    bootstrap = bootstrap_of(root / "data")
    create_topics(bootstrap, [NewTopic(TXN_TOPIC, 1, 1)])
    leader, address = leader_address_of(bootstrap, TXN_TOPIC)
    with wire.connect(address) as sock:
        plain(sock, TXN_TOPIC, [b"before"])  # 0
        producer = TxnProducer(sock, "open")
        producer.send(sock, TXN_TOPIC, 2)  # 1-2
        plain(sock, TXN_TOPIC, [b"after"])  # 3
    view.locator("select.pylog-focus-topic").select_option(TXN_TOPIC)
    row = view.locator(f'.pylog-partition[data-partition="{TXN_TOPIC}-0"] .pylog-replica')
    expect(row.locator(".pylog-lso")).to_have_attribute("data-offset", "1", timeout=WAIT_MS)
    expect(row.locator(".pylog-open-txn")).to_have_attribute("data-first", "1")
    shows(view, row, "HW 4 · LSO 1 · LEO 4")
    shows(view, row, "1 open transaction")
    expect(view.locator(".pylog-legend")).to_contain_text("LSO (last stable offset)")
    view.screenshot(path=str(artifacts / "open-transaction.png"))
    # The commit marker, written as WriteTxnMarkers will, while the view's kill holds it down.
    node = view.locator(f'.pylog-node[data-broker="{leader}"]')
    node.click()
    view.locator('button.pylog-action[data-action="kill"]').click()
    shows(view, view.locator(".pylog-actions"), f"kill broker {leader}: done")
    with partition_log(root / "data" / f"broker-{leader}", TXN_TOPIC) as log:
        end_txn(log, producer, commit=True)  # 4
    view.locator('button.pylog-action[data-action="restart"]').click()
    shows(view, view.locator(".pylog-actions"), f"restart broker {leader}: done")
    shows(view, row, "HW 5 · LEO 5")
    expect(row.locator(".pylog-lso")).to_have_count(0)
    expect(row.locator(".pylog-open-txn")).to_have_count(0)
    expect(row).not_to_contain_text("open transaction")
    view.locator("select.pylog-focus-topic").select_option("")


def test_commit_and_abort_markers_are_drawn_on_every_replica(view, lab, artifacts):
    _url, root = lab
    bootstrap = bootstrap_of(root / "data")
    create_topics(bootstrap, [NewTopic(MARKERS_TOPIC, 1, MARKERS_REPLICAS)])
    with transaction(bootstrap, "view-commit") as committed:
        committed.produce(MARKERS_TOPIC, "paid", partition=0)  # 0; its commit marker at 1
    aborted = transaction(bootstrap, "view-abort")
    aborted.produce(MARKERS_TOPIC, "refunded", partition=0)  # 2
    assert list(aborted.flush().offset) == [2]
    aborted.abort()  # its abort marker at 3
    view.locator("select.pylog-focus-topic").select_option(MARKERS_TOPIC)
    rows = view.locator(f'.pylog-partition[data-partition="{MARKERS_TOPIC}-0"] .pylog-replica')
    commits = rows.locator('.pylog-marker.commit[data-offset="1"][data-type="COMMIT"]')
    aborts = rows.locator('.pylog-marker.abort[data-offset="3"][data-type="ABORT"]')
    expect(rows).to_have_count(MARKERS_REPLICAS)
    expect(commits).to_have_count(MARKERS_REPLICAS, timeout=WAIT_MS)
    expect(aborts).to_have_count(MARKERS_REPLICAS, timeout=WAIT_MS)
    expect(rows.locator(".pylog-marker")).to_have_count(2 * MARKERS_REPLICAS)
    for marks in (commits, aborts):
        for i in range(MARKERS_REPLICAS):
            drawn = drawn_stroke(marks.nth(i).locator(".pylog-marker-tick"))
            assert drawn is not None and drawn[0] > 0 and drawn[1] not in ("0px", ""), drawn
    hover = commits.first.locator("title").text_content()
    assert hover.startswith("COMMIT marker at offset 1, producer id "), hover
    assert "an offset no consumer receives" in hover
    assert aborts.first.locator("title").text_content().startswith(
        "ABORT marker at offset 3, producer id ")
    for i in range(MARKERS_REPLICAS):
        shows(view, rows.nth(i), "markers 1 commit, 3 abort")
        shows(view, rows.nth(i), "HW 4 · LEO 4")  # the follower knows the HW too
    shows(view, view.locator(".pylog-legend"), "A marker: an offset no consumer receives")
    expect(view.locator(".pylog-legend .pylog-marker.commit")).to_have_count(1)
    expect(view.locator(".pylog-legend .pylog-marker.abort")).to_have_count(1)
    clipped(view.locator(f'.pylog-partition[data-partition="{MARKERS_TOPIC}-0"]'),
            artifacts / "markers.png")
    view.locator(".pylog-legend").screenshot(path=str(artifacts / "legend.png"))
    view.locator("select.pylog-focus-topic").select_option("")


def leader_address_of(bootstrap: str, topic: str) -> tuple[int, str]:
    """The partition 0 leader's id and host:port, once it has one."""
    client = AdminClient({**kafka_conf(bootstrap), "log_level": 0})
    for _attempt in range(WAIT_S):
        metadata = client.list_topics(topic, timeout=WAIT_S)
        leader = metadata.topics[topic].partitions[0].leader
        if leader >= 0:
            broker = metadata.brokers[leader]
            return leader, f"{broker.host}:{broker.port}"
        time.sleep(1)
    raise AssertionError(f"{topic}-0 has no leader after {WAIT_S} s")


def drawn_stroke(tick) -> list:
    """A vertical tick's length and stroke width as drawn (its geometric box has no width, so
    the stroke itself is checked). The view redraws its rows as the cluster changes, and a
    replaced element is no longer rendered: ask again for the one drawn now."""
    deadline = time.monotonic() + WAIT_S
    while True:
        drawn = tick.evaluate("tick => tick.isConnected"
                              " ? [tick.getTotalLength(), getComputedStyle(tick).strokeWidth]"
                              " : null")
        if drawn is not None or time.monotonic() > deadline:
            return drawn
        time.sleep(POLL_S)


def test_killing_the_active_controller_from_the_view_shows_another_one_active(view, artifacts):
    controllers = view.locator(".pylog-ctrl")
    expect(controllers).to_have_count(3)  # three brokers run a quorum of three controllers
    active = view.locator('.pylog-ctrl[data-active="true"]')
    expect(active).to_have_count(1)
    expect(active).to_have_attribute("data-role", "leader")
    old = int(active.get_attribute("data-controller"))
    node = view.locator(f'.pylog-ctrl[data-controller="{old}"]')
    expect(node).to_contain_text("active leader")
    node.click()
    shows(view, view.locator(".pylog-actions-title"), f"controller {old}")
    view.locator('button.pylog-action[data-kind="controller"][data-action="kill"]').click()
    shows(view, view.locator(".pylog-actions"), f"kill controller {old}: done")
    expect(node).to_have_attribute("data-state", "down")
    # Another controller is elected and its epoch begins; the dead one keeps what it last said.
    expect(active).to_have_attribute("data-controller", re.compile(rf"^(?!{old}$)[0-9]+$"),
                                     timeout=WAIT_MS)
    expect(active).to_have_count(1)  # never two active controllers
    new = int(active.get_attribute("data-controller"))
    expect(node).to_have_attribute("data-last-known", "true")
    expect(node).to_have_attribute("data-stale", "true")  # its epoch is over
    expect(node).to_contain_text("was leader (stale epoch")
    expect(node).to_contain_text("down · last known")
    expect(active).to_contain_text("active leader")
    shows(view, view.locator(".pylog-head"), f"active: controller {new}")
    shows(view, view.locator(".pylog-events"), f"controller {new} became active (epoch")
    expect(view.locator(".pylog-mark.cat-controller").first).to_be_attached()
    view.screenshot(path=str(artifacts / "controller-failover.png"))
    view.locator('button.pylog-action[data-kind="controller"][data-action="kill"]').click()
    shows(view, view.locator(".pylog-actions"),
          f"kill refused: controller {old} is already down")


def test_stepping_back_replays_an_earlier_snapshot(view):
    view.locator("button.pylog-back").click()
    shows(view, view.locator(".pylog-replaying"), "Replaying the cluster as it was at")
    expect(view.locator('button.pylog-action[data-action="kill"]')).to_be_disabled()
    view.locator(".pylog-replaying button.pylog-live").click()
    expect(view.locator(".pylog-replaying")).to_have_count(0)


def test_the_view_reads_in_the_dark_theme(page, view, artifacts):
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Dark'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
    background = view.evaluate("node => getComputedStyle(node).backgroundColor")
    text = view.evaluate("node => getComputedStyle(node).color")
    assert _luminance(background) < _luminance(text), (background, text)
    view.screenshot(path=str(artifacts / "dark.png"))


def _luminance(css_colour: str) -> float:
    red, green, blue = (int(v) for v in re.findall(r"\d+", css_colour)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


# == the view on a bare page (tests/support/view_page.py): geometry, texts, layout, glyphs ======

LAPTOP = {"width": 1400, "height": 900}
FOLD_PX = 900  # a laptop's viewport: the topology and the timeline must both be inside it
SILENT_SINCE_MS = 1_764_158_463_000  # when the dead broker went silent
STACKED_POSITIONS = 40  # as filed in issue 19: 129 marks on 40 x positions
STACKED_MARKS = 129
PX_TOLERANCE = 0.75  # sub-pixel rounding of the drawn geometry
KERNEL_ANSWER_MS = 5000  # as cluster_view.js: how long a view waits for its kernel's answer


def isolated_leader_snapshot() -> dict:
    """orders-0 after its leader (broker 3) was isolated and took 5 acks=1 writes: broker 3
    claims leader at stale epoch 2 with LEO 10, broker 2 leads at epoch 3 with LEO 5. orders-1:
    broker 4, its leader until SIGKILL, is down; every replica at LEO 4, with labels of every
    width."""
    stale = ("stale leader: acts as leader at epoch 2, controller: broker 2 leads at epoch 3; "
             "isolated broker still claims leadership")
    orders_0 = view_page.partition("orders", 0, leader=2, epoch=3, isr=[2, 1], replicas={
        3: view_page.replica("leader", 2, 10, hw=5, disagreement=stale),
        2: view_page.replica("leader", 3, 5),
        1: view_page.replica("follower", 3, 5, lag_records=0)}, assigned=[3, 2, 1])
    orders_1 = view_page.partition("orders", 1, leader=1, epoch=1, isr=[1, 2], replicas={
        4: view_page.replica("leader", 0, 4, last_known=True, disagreement=(
            "last claimed leader at epoch 0; controller: broker 1 leads at epoch 1")),
        1: view_page.replica("leader", 1, 4),
        2: view_page.replica("follower", 1, 4, lag_records=0)}, assigned=[4, 1, 2])
    return view_page.snapshot({1: "up", 2: "up", 3: "isolated", 4: "down"},
                              [orders_0, orders_1], silent_since_ms=SILENT_SINCE_MS)


def stacked_marks(start_ms: int) -> list[dict]:
    """``STACKED_MARKS`` marks at ``STACKED_POSITIONS`` moments 10 s apart."""
    return [{"seq": n + 1, "now_ms": start_ms + (n % STACKED_POSITIONS) * 10_000,
             "source": "controller", "kind": "leader_elected",
             "category": ("election", "isr", "broker")[n % 3], "topic": "orders",
             "text": f"event {n}"} for n in range(STACKED_MARKS)]


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where the bare page's screenshots go (printed)."""
    where = tmp_path_factory.mktemp("view-shots")
    print(f"bare-page screenshots in {where}")
    return where


def drawn_bars(page, topic: str) -> dict[str, dict]:
    """Per replica row of ``topic`` ("orders-0/3"): its LEO and HW, and the screen x of its
    track (the whole axis) and of its outline (log start to LEO)."""
    return page.evaluate("""(topic) => {
      const rows = {};
      const topicRoot = document.querySelector(`.pylog-topic[data-topic="${topic}"]`);
      for (const p of topicRoot.querySelectorAll(".pylog-partition")) {
        for (const r of p.querySelectorAll(".pylog-replica[data-broker]")) {
          const box = (selector) => {
            const b = r.querySelector(selector).getBoundingClientRect();
            return [b.left, b.right];
          };
          rows[`${p.dataset.partition}/${r.dataset.broker}`] = { leo: Number(r.dataset.leo),
            hw: Number(r.dataset.hw), track: box(".pylog-track"), outline: box(".pylog-outline"),
            hwTick: box(".pylog-hw-tick")[0],
            role: r.querySelector(".pylog-r-role").textContent };
        }
      }
      return rows;
    }""", topic)


def test_every_replica_bar_of_a_topic_shares_one_offset_axis(browser, shots):
    """Whatever the width of a row's labels: the same origin and scale, so a longer log is a
    longer bar and equal offsets are at equal x."""
    page = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS)
    bars = drawn_bars(page, "orders")
    assert "claims leader (stale epoch 2)" in bars["orders-0/3"]["role"]
    assert len({tuple(round(v) for v in b["track"]) for b in bars.values()}) == 1, bars
    [left, right] = bars["orders-0/3"]["track"]
    low, high = 0, 10  # the topic's axis: no log starts above 0, the longest ends at 10
    for name, b in bars.items():
        at = left + (b["leo"] - low) / (high - low) * (right - left)
        assert abs(b["outline"][1] - at) < PX_TOLERANCE, (name, b, at)
        assert abs(b["outline"][0] - left) < PX_TOLERANCE, (name, b)
    longer, shorter = bars["orders-0/3"], bars["orders-0/2"]
    width = {name: b["outline"][1] - b["outline"][0] for name, b in bars.items()}
    assert width["orders-0/3"] > width["orders-0/2"], width
    assert abs(longer["hwTick"] - shorter["hwTick"]) < PX_TOLERANCE  # both at HW 5
    fours = [b["outline"][1] for name, b in bars.items() if name.startswith("orders-1/")]
    assert len(fours) == 3 and max(fours) - min(fours) < PX_TOLERANCE, fours
    orders = page.locator('.pylog-topic[data-topic="orders"]')
    orders.screenshot(path=str(shots / "shared-axis.png"))
    page.close()


def test_a_dead_brokers_replica_says_since_when_and_what_it_last_claimed(browser,
                                                                         shots):
    page = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS)
    row = page.locator('.pylog-partition[data-partition="orders-1"] '
                       '.pylog-replica[data-broker="4"]')
    since = page.evaluate("ms => new Date(ms).toTimeString().slice(0, 8)", SILENT_SINCE_MS)
    expect(row.locator(".pylog-r-role")).to_contain_text(f"down since {since}")
    expect(row.locator(".pylog-r-role")).to_contain_text("last claimed leader at epoch 0")
    expect(row).to_contain_text("last claimed leader at epoch 0; controller: broker 1 leads")
    expect(row).not_to_contain_text("acts as")
    expect(row.locator(".pylog-lag")).to_have_text("lag unknown")
    expect(row.locator(".pylog-lag")).to_have_class(re.compile(r"\bpylog-dim\b"))  # not orange
    page.locator('.pylog-partition[data-partition="orders-1"]').screenshot(
        path=str(shots / "dead-broker.png"))
    page.close()


def test_a_view_without_an_answering_kernel_says_so_until_one_answers(browser):
    """A view whose hello gets no answer (a busy kernel, or a view drawn from a saved notebook
    whose kernel is gone) says so after KERNEL_ANSWER_MS, and stops saying it once answered;
    one answered at once never says it."""
    silent = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS,
                            kernel=False)
    assert silent.evaluate("window.sent").count({"type": "hello"}) == 1
    warning = silent.locator(".pylog-head .pylog-no-kernel")
    expect(warning).to_contain_text("no answer from the kernel yet", timeout=WAIT_MS)
    expect(warning).to_contain_text("saved with the notebook")
    silent.evaluate("window.answer()")
    expect(warning).to_have_count(0)
    silent.close()
    answered = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS)
    answered.wait_for_timeout(KERNEL_ANSWER_MS + 1000)
    expect(answered.locator(".pylog-no-kernel")).to_have_count(0)
    answered.close()


def test_the_view_fits_a_laptop_screen_with_the_legend_folded(browser, shots):
    """The topology and the timeline within the first 900 px, so the timeline can be scrubbed
    while the brokers change; the legend folded until asked for."""
    page = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS,
                          marks=stacked_marks(SILENT_SINCE_MS - 400_000), viewport=LAPTOP)
    view = page.locator(".pylog-view")
    top = view.bounding_box()["y"]
    expect(view.locator("details.pylog-legend")).not_to_have_attribute("open", re.compile(".*"))
    topology = view.locator(".pylog-topology").bounding_box()
    controls = view.locator(".pylog-section-timeline .pylog-controls").bounding_box()
    assert topology["y"] + topology["height"] - top <= FOLD_PX, topology
    assert controls["y"] + controls["height"] - top <= FOLD_PX, controls
    page.screenshot(path=str(shots / "laptop-1400x900.png"))
    page.close()


def test_a_hover_on_stacked_timeline_marks_lists_every_mark_there(browser):
    marks = stacked_marks(SILENT_SINCE_MS - 400_000)
    page = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS,
                          marks=marks)
    stacks = page.locator(".pylog-strip-svg .pylog-mark")
    expect(stacks).to_have_count(STACKED_POSITIONS)
    counts = [int(c) for c in stacks.evaluate_all("gs => gs.map((g) => g.dataset.count)")]
    assert sum(counts) == STACKED_MARKS, counts
    first = stacks.first.locator(":scope > title").text_content()
    assert first.startswith(f"{counts[0]} events here"), first
    at_first = [m for m in marks if m["now_ms"] == marks[0]["now_ms"]]
    assert all(f"controller: {m['text']}\n" in first + "\n" for m in at_first), first
    stacks.first.locator(".pylog-mark-hit").click()  # replays the stack's first snapshot
    assert page.evaluate("window.sent")[-1:] == [{"type": "replay", "seq": at_first[0]["seq"]}]
    page.close()


def test_every_glyph_the_view_draws_is_in_the_pages_fonts(browser, shots):
    """Debian's Chromium fonts (DejaVu, Liberation) lack some emoji (⏪ was an empty box)."""
    page = view_page.show(browser, isolated_leader_snapshot(), taken_ms=SILENT_SINCE_MS,
                          marks=stacked_marks(SILENT_SINCE_MS - 400_000), replaying=True)
    page.locator("details.pylog-legend > summary").click()  # the legend's marks too
    view = page.locator(".pylog-view")
    expect(view.locator(".pylog-replaying")).to_contain_text("Replaying the cluster")
    assert view.evaluate(view_page.MISSING_GLYPHS_JS) == []
    page.screenshot(path=str(shots / "replaying-with-legend.png"), full_page=True)
    page.close()


# == a saved notebook keeps a picture of the view ===============================================


def test_a_notebook_saved_after_its_kernel_shut_down_reopens_with_a_picture_of_the_view(
        browser, tmp_path, shots):
    """Shutting the kernel down (JupyterLab's Kernel menu) closes the open view, which leaves
    a static picture of its last state in its cell; saved, and reopened by a new server with a
    new kernel, the notebook shows the picture, not "Error displaying widget: model not
    found"."""
    def shut_the_kernel_down(page) -> None:
        page.evaluate("window.jupyterapp.commands.execute('kernelmenu:shutdown')")
        expect(page.locator(".pylog-closed-view")).to_contain_text("Cluster view (closed at",
                                                                   timeout=WAIT_MS)
        expect(page.locator(".pylog-view")).to_have_count(0)

    with saved_and_reopened(browser, tmp_path, shut_the_kernel_down) as page:
        picture = page.locator(".pylog-closed-view")
        expect(picture).to_contain_text(f"{TOPIC}-0", timeout=WAIT_MS)
        picture.screenshot(path=str(shots / "saved-notebook-picture.png"))


def test_a_notebook_saved_while_its_view_is_open_reopens_with_the_view_drawn(
        browser, tmp_path, shots):
    """scripts/setup.sh turns on JupyterLab's "Save Widget State Automatically": a notebook
    saved while the view is open keeps the view's last state, and reopened by a new server
    (the old kernel and cluster gone) draws it again instead of "Error displaying widget:
    model not found", saying it may be a saved picture (no kernel answers it)."""
    with saved_and_reopened(browser, tmp_path, lambda _page: None) as page:
        redrawn = page.locator(f'.pylog-view .pylog-partition[data-partition="{TOPIC}-0"]')
        expect(redrawn).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator(".pylog-view .pylog-no-kernel")).to_contain_text(
            "saved with the notebook", timeout=WAIT_MS)
        page.locator(".pylog-view").screenshot(path=str(shots / "saved-open-view.png"))


@contextmanager
def saved_and_reopened(browser, tmp_path: Path, before_saving) -> Iterator:
    """Run a notebook that shows the view of a one-broker cluster, call ``before_saving`` with
    the page, save the notebook and stop its server; yield it reopened by a new server with a
    new kernel, once that kernel is idle and no "Error displaying widget" shows."""
    write_notebook(tmp_path / NOTEBOOK, [
        "%load_ext pylog_nb",
        f"cluster = %log_cluster start --brokers 1 --data-dir {tmp_path / 'data'}",
        f"%log_topic create {TOPIC} -p 1 -r 1",
        "view = %log_watch",
        "view"])
    with running_lab(tmp_path) as server:
        page = browser.new_page(viewport=LAPTOP)
        page.set_default_timeout(WAIT_MS)
        page.goto(server.url(NOTEBOOK))
        run_all_cells(page)
        expect(page.locator(f'.pylog-view .pylog-partition[data-partition="{TOPIC}-0"]')
               ).to_have_count(1, timeout=WAIT_MS)
        before_saving(page)
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        expect(page.locator(".jp-mod-dirty")).to_have_count(0, timeout=WAIT_MS)
        page.close()
    with running_lab(tmp_path) as server:
        page = browser.new_page(viewport=LAPTOP)
        page.set_default_timeout(WAIT_MS)
        page.goto(server.url(NOTEBOOK))
        expect(page.locator("#jp-main-statusbar")).to_contain_text(KERNEL_IDLE, timeout=WAIT_MS)
        try:
            yield page
            expect(page.get_by_text("Error displaying widget")).to_have_count(0)
        finally:
            page.close()
