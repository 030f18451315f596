"""The %log_* magics in a real IPython shell, against real broker processes."""

from __future__ import annotations

import re
import socket
import time

import pandas as pd
import pytest
from confluent_kafka.admin import BrokerMetadata, ClusterMetadata
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from pylog_nb import LocalCluster
from pylog_nb.client import controller_faults, probe
from pylog_nb.client.introspect import QUORUM_COLUMNS
from pylog_nb.client.io import LogClientError
from pylog_nb.client.status import waiting
from pylog_nb.client.txn import transaction
from pylog_nb.magics import log_magics

# Behaviour contracts, not benchmarks: generous on a loaded machine, far below the 10-30 s that
# librdkafka takes to give up on its own.
FAILS_FAST_S = 10.0


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "pylog_nb")
    data_dir = tmp_path_factory.mktemp("magics")
    ipython.run_line_magic("log_cluster", f"start --brokers 1 --data-dir {data_dir}")
    yield ipython
    ipython.run_line_magic("log_cluster", "stop")


@pytest.fixture
def detached(shell):
    """The magics with no cluster in use; the module's local cluster is given back after."""
    magics = shell.magics_manager.registry["LogMagics"]
    saved = magics.cluster, magics.bootstrap
    magics.cluster = magics.bootstrap = None
    yield magics
    magics.cluster, magics.bootstrap = saved


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return unused.getsockname()[1]


def line(shell, magic: str, text: str = ""):
    return shell.run_line_magic(magic, text)


def timed_error(shell, magic: str, text: str) -> tuple[str, float]:
    """The UsageError's message and how long the magic took to give it."""
    started_s = time.monotonic()
    with pytest.raises(UsageError) as caught:
        line(shell, magic, text)
    return str(caught.value), time.monotonic() - started_s


def test_produce_then_consume_round_trip_with_variable_expansion(shell, topic_name):
    shell.user_ns["greeting"] = "hello notebook"
    produced = shell.run_cell(f"%log_produce {topic_name} {{greeting}} -k k1").result
    assert list(produced[["partition", "offset", "key", "value"]].itertuples(index=False)) == [
        (0, 0, "k1", "hello notebook")]
    shell.run_cell_magic("log_produce", f"{topic_name} -s :", "a:1\nb:2\n\nc:3:with colon\n")
    consumed = line(shell, "log_consume", topic_name)
    assert list(consumed.value) == ["hello notebook", "1", "2", "3:with colon"]
    assert list(consumed.key) == ["k1", "a", "b", "c"]
    assert list(consumed.offset) == [0, 1, 2, 3]
    assert list(line(shell, "log_consume", f"{topic_name} --from 2 -n 1").value) == ["2"]


def test_a_bad_cell_writes_nothing(shell, topic_name):
    line(shell, "log_produce", f"{topic_name} first")
    with pytest.raises(UsageError, match="has no separator"):
        shell.run_cell_magic("log_produce", f"{topic_name} -s :", "a:1\nno separator here\n")
    with pytest.raises(UsageError, match="acks must be one of"):
        line(shell, "log_produce", f"{topic_name} x --acks 2")
    assert list(line(shell, "log_consume", topic_name).value) == ["first"]


def test_group_reads_commit_and_lag_shows_it(shell, topic_name):
    shell.run_cell_magic("log_produce", topic_name, "r0\nr1\nr2\n")
    group = f"g-{topic_name}"
    assert list(line(shell, "log_consume", f"{topic_name} -g {group} -n 2").value) == ["r0", "r1"]
    assert list(line(shell, "log_consume", f"{topic_name} -g {group}").value) == ["r2"]
    lag = line(shell, "log_lag", group)
    assert list(lag[["committed_offset", "high_watermark", "log_end_offset", "lag"]]
                .itertuples(index=False)) == [(3, 3, 3, 0)]
    groups = line(shell, "log_groups")
    assert group in set(groups.group)


def test_log_groups_sets_and_unsets_a_group_config(shell, topic_name):
    group = f"cfg-{topic_name}"
    configs = line(shell, "log_groups", f"{group} --set share.auto.offset.reset=earliest "
                                        "--set share.record.lock.duration.ms=20000")
    by_name = configs.set_index("name")
    assert by_name.loc["share.auto.offset.reset", "value"] == "earliest"
    assert by_name.loc["share.auto.offset.reset", "source"] == "group"
    assert by_name.loc["share.isolation.level", "source"] == "default"
    after = line(shell, "log_groups", f"{group} --unset share.auto.offset.reset").set_index("name")
    assert (after.loc["share.auto.offset.reset", "value"],
            after.loc["share.auto.offset.reset", "source"]) == ("latest", "default")
    assert after.loc["share.record.lock.duration.ms", "value"] == "20000"
    with pytest.raises(UsageError, match="INVALID_CONFIG.*share.isolation.level"):
        line(shell, "log_groups", f"{group} --set share.isolation.level=sometimes")


def test_errors_are_one_line(shell, topic_name):
    with pytest.raises(UsageError, match=r"^topic no-such-topic does not exist$"):
        line(shell, "log_consume", "no-such-topic")
    with pytest.raises(UsageError, match=r"name a broker: one of \[1\]"):
        line(shell, "log_cluster", "kill 9")
    with pytest.raises(UsageError, match="invalid choice"):
        line(shell, "log_cluster", "explode")
    with pytest.raises(UsageError, match="not a connection: %log_cluster stop stops it"):
        line(shell, "log_cluster", "disconnect")
    with pytest.raises(UsageError, match="^choose partitions or a group"):
        line(shell, "log_consume", f"{topic_name} -g g -p 0")
    line(shell, "log_produce", f"{topic_name} x")
    with pytest.raises(UsageError, match="has no partition 4"):
        line(shell, "log_consume", f"{topic_name} -p 4")


def test_kill_restart_and_status(shell, topic_name):
    line(shell, "log_produce", f"{topic_name} survives")
    line(shell, "log_cluster", "kill 1")
    line(shell, "log_cluster", "restart 1")
    status = line(shell, "log_cluster", "status")
    row = status[status.topic == topic_name].iloc[0]
    assert (row.role, row.high_watermark, row.log_end_offset) == ("leader", 1, 1)
    assert list(line(shell, "log_consume", topic_name).value) == ["survives"]


def test_connect_to_another_cluster_then_disconnect_leaves_it_running(shell, detached, tmp_path,
                                                                      topic_name, capsys):
    with LocalCluster(brokers=1, data_dir=tmp_path) as other:
        line(shell, "log_cluster", f"connect {other.bootstrap_servers}")
        assert f"connected to {other.bootstrap_servers}: 1 broker, 0 topics" in \
            capsys.readouterr().out
        line(shell, "log_produce", f"{topic_name} elsewhere")
        assert list(line(shell, "log_consume", topic_name).value) == ["elsewhere"]
        with pytest.raises(UsageError, match="needs a local cluster"):
            line(shell, "log_cluster", "status")
        with pytest.raises(UsageError, match="^connected to .*: %log_cluster disconnect first"):
            line(shell, "log_cluster", "start")
        line(shell, "log_cluster", "disconnect")
        assert detached.bootstrap is None
        with pytest.raises(UsageError, match="^no cluster: %log_cluster start, or"):
            line(shell, "log_topic", "list")
        line(shell, "log_cluster", "disconnect")  # a rerun of the cell is harmless
        assert "not connected: nothing to do" in capsys.readouterr().out
        assert topic_name in probe.check_cluster(other.bootstrap_servers).topics  # still up


def test_connect_to_a_closed_port_fails_in_seconds_with_one_line(shell, detached, closed_port):
    message, took_s = timed_error(shell, "log_cluster", f"connect 127.0.0.1:{closed_port}")
    assert message == (f"no Kafka broker answers at 127.0.0.1:{closed_port} (connection refused) "
                       f"within {probe.CONNECT_TIMEOUT_S:g} s")
    assert took_s < FAILS_FAST_S
    assert detached.bootstrap is None


def test_connect_to_a_port_where_no_kafka_answers_fails_within_the_timeout(shell, detached):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        message, took_s = timed_error(shell, "log_cluster", f"connect {address}")
    assert message == (f"no Kafka broker answers at {address} (the port is open, but no Metadata "
                       f"answer comes) within {probe.CONNECT_TIMEOUT_S:g} s")
    assert took_s < FAILS_FAST_S


def test_a_failed_connect_keeps_the_previous_connection(shell, detached, closed_port):
    detached.bootstrap = "127.0.0.1:9"  # as if connected before
    with pytest.raises(UsageError, match="connection refused"):
        line(shell, "log_cluster", f"connect 127.0.0.1:{closed_port}")
    assert detached.bootstrap == "127.0.0.1:9"


@pytest.mark.parametrize(("address", "message"), [
    ("kafka", "'kafka' is not HOST:PORT"),
    ("kafka:", "'kafka:': the port must be a number from 1 to 65535"),
    ("kafka:http", "'kafka:http': the port must be a number"),
    ("kafka:0", "'kafka:0': the port must be a number"),
    ("kafka:65536", "'kafka:65536': the port must be a number"),
    (":9092", "':9092' is not HOST:PORT"),
    ("a:1,,b:2", "an empty address in the list"),
    ("http://kafka:9092", "'http://kafka:9092' is not HOST:PORT"),
])
def test_a_malformed_address_is_refused_before_any_network_call(shell, detached, monkeypatch,
                                                                address, message):
    def no_network(*_args, **_kwargs):
        raise AssertionError("a malformed address reached the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(UsageError) as caught:
        line(shell, "log_cluster", f"connect {address}")
    assert str(caught.value).startswith(message)
    assert detached.bootstrap is None


def test_connect_refuses_a_cluster_that_advertises_an_unreachable_broker(closed_port):
    metadata = ClusterMetadata()
    broker = BrokerMetadata()
    broker.id, broker.host, broker.port = 7, "127.0.0.1", closed_port
    metadata.brokers = {7: broker}
    with pytest.raises(LogClientError, match=rf"^b:1 answers, but its broker 7 is advertised at "
                       rf"127\.0\.0\.1:{closed_port}, which this machine cannot reach "
                       r"\(connection refused\)"):
        probe._check_advertised(metadata, "b:1", time.monotonic() + probe.CONNECT_TIMEOUT_S)


def test_consuming_a_missing_topic_says_so_at_once_with_or_without_a_group(shell):
    for text in ("no-such-topic -g g-missing", "no-such-topic", "no-such-topic -g g -n 3"):
        message, took_s = timed_error(shell, "log_consume", text)
        assert message == "topic no-such-topic does not exist"
        assert took_s < FAILS_FAST_S / 2, text  # it used to be the 10 s consume timeout


def test_a_wait_over_a_second_says_what_it_waits_for_and_what_came_of_it(shell, topic_name,
                                                                          capsys):
    line(shell, "log_produce", f"{topic_name} old")
    capsys.readouterr()
    frame = line(shell, "log_consume", f"{topic_name} -n 2 --from latest --timeout 1.5")
    assert frame.empty  # nothing new was written while it waited
    assert capsys.readouterr().out.splitlines() == [
        f"waiting for 2 new records of {topic_name} (up to 1.5 s for each)…",
        "0 of 2 records: no more arrived within 1.5 s"]


def test_a_quick_or_failed_wait_leaves_no_line(shell, capsys):
    with waiting("a quick wait…") as status:
        status.done("")
    with pytest.raises(RuntimeError), waiting("a doomed wait…", delay_s=0) as status:
        status.done("never shown: the error says what happened")
        raise RuntimeError
    with waiting("a long wait…", delay_s=0) as status:
        status.done("over")
    assert capsys.readouterr().out.splitlines() == ["a doomed wait…", "", "a long wait…", "over"]


def test_a_wait_that_turns_out_to_be_for_something_else_says_so(shell, capsys):
    with waiting("asking the leaders of t for offsets…", delay_s=0) as status:
        status.say("waiting for the leaders of t to answer…")
    with waiting("a quick wait…") as status:
        status.say("never shown: over before a second")
    assert capsys.readouterr().out.splitlines() == [
        "asking the leaders of t for offsets…", "waiting for the leaders of t to answer…", ""]


def test_log_spark_refuses_an_offset_past_the_end_in_one_line_without_starting_spark(
        shell, topic_name):
    pytest.importorskip("pyspark")
    from pyspark import SparkContext

    gateway = SparkContext._gateway  # None unless another test started Spark already
    shell.run_cell_magic("log_produce", topic_name, "a\nb\n")
    message, took_s = timed_error(shell, "log_spark", f"{topic_name} --to 0:99")
    assert message == f"ending offset 99 of {topic_name}-0 is past its end: its high watermark is 2"
    message, _ = timed_error(shell, "log_spark", f"{topic_name} --from 0:3")
    assert message == (f"starting offset 3 of {topic_name}-0 is past its end: its high "
                       "watermark is 2")
    assert took_s < FAILS_FAST_S
    assert SparkContext._gateway is gateway


def test_topics_are_created_listed_and_deleted(shell, topic_name):
    line(shell, "log_topic", f"create {topic_name} -p 3 -c retention.ms=60000")
    topics = line(shell, "log_topic", "list")
    row = topics[topics.topic == topic_name].iloc[0]
    assert (row.partitions, row.replication_factor, row.internal) == (3, 1, False)
    with pytest.raises(UsageError, match="already exists"):
        line(shell, "log_topic", f"create {topic_name}")
    with pytest.raises(UsageError, match="Replication factor"):
        line(shell, "log_topic", f"create {topic_name}-2 -r 5")
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        line(shell, "log_topic", f"create {topic_name}-3 -c retention.ms")
    line(shell, "log_topic", f"delete {topic_name}")
    assert topic_name not in set(line(shell, "log_topic", "list").topic)


# -- the controller quorum -----------------------------------------------------------------------

CONTROLLER_DONE = re.compile(r"^controller (\d): (\w+) done \((.*)\)$")


@pytest.fixture
def said(monkeypatch):
    """Every status line the magics and the controller faults open, shown at once."""
    texts: list[str] = []

    def recording(text, **_kwargs):
        texts.append(text)
        return waiting(text, delay_s=0)

    monkeypatch.setattr(log_magics, "waiting", recording)
    monkeypatch.setattr(controller_faults, "waiting", recording)
    return texts


@pytest.fixture
def quorum_shell(shell, detached, tmp_path, said):
    """The magics on a cluster of one broker under three controllers."""
    line(shell, "log_cluster", f"start --brokers 1 --controllers 3 --data-dir {tmp_path}")
    try:
        yield shell
    finally:
        line(shell, "log_cluster", "stop")


def fault(shell, capsys, text: str) -> tuple[int, str, str]:
    """Run %log_cluster TEXT; the controller, action and parenthesis of the one line it says."""
    capsys.readouterr()
    line(shell, "log_cluster", text)
    said = [s for s in capsys.readouterr().out.splitlines() if CONTROLLER_DONE.match(s)]
    assert len(said) == 1, said
    match = CONTROLLER_DONE.match(said[0])
    assert match is not None
    return int(match[1]), match[2], match[3]


def quorum(shell) -> pd.DataFrame:
    return line(shell, "log_cluster", "status quorum").set_index("controller")


@pytest.mark.parametrize(("brokers", "controllers", "text"), [
    (1, None, "starting 1 controller and 1 broker…"),
    (2, None, "starting 1 controller and 2 brokers…"),
    (3, None, "starting 3 controllers and 3 brokers…"),
    (1, 3, "starting 3 controllers and 1 broker…")])
def test_start_says_how_many_controllers_and_brokers(shell, detached, tmp_path, said,
                                                     monkeypatch, brokers, controllers, text):
    monkeypatch.setattr(LocalCluster, "start", lambda cluster: cluster)  # no processes
    option = "" if controllers is None else f" --controllers {controllers}"
    line(shell, "log_cluster", f"start --brokers {brokers}{option} --data-dir {tmp_path}")
    assert said == [text]
    assert len(detached.cluster.controllers) == (controllers or {1: 1, 2: 1, 3: 3}[brokers])
    detached.cluster.stop()


def test_start_again_stops_the_running_cluster_closes_its_views_and_starts_anew(
        shell, detached, capsys):
    line(shell, "log_cluster", "start --brokers 1")
    old = detached.cluster
    old_pids = {*old.broker_pids().values(), *old.controller_pids().values()}
    view = line(shell, "log_watch")
    line(shell, "log_cluster", "pause 1")  # a Run All that failed after a fault
    capsys.readouterr()
    new = line(shell, "log_cluster", "start --brokers 1")
    try:
        said = capsys.readouterr().out.splitlines()  # status lines too, on a slow machine
        assert [text for text in said if text and not text.endswith("…")] == [
            "stopped the running cluster (1 broker) and started a new one"]
        assert view.comm is None  # closed: it no longer refreshes from the old cluster
        assert not old.is_running(1) and not old.data_dir.exists()
        assert not old_pids & {*new.broker_pids().values(), *new.controller_pids().values()}
        assert detached.cluster is new and new.broker_states() == {1: "up"}
    finally:
        line(shell, "log_cluster", "stop")


def test_status_shows_the_quorum_above_the_partitions(quorum_shell, topic_name, capsys):
    line(quorum_shell, "log_produce", f"{topic_name} x")
    capsys.readouterr()
    partitions = line(quorum_shell, "log_cluster", "status")
    shown = capsys.readouterr().out
    assert shown.splitlines()[0].split() == QUORUM_COLUMNS  # the quorum frame, displayed
    assert topic_name in set(partitions.topic)  # the partitions, returned
    frame = quorum(quorum_shell)
    assert list(frame.index) == [1, 2, 3] and set(frame.state) == {"up"}
    assert frame.active.sum() == 1
    active = int(frame.index[frame.active][0])
    assert frame.loc[active, "role"] == "leader"
    assert set(frame.leader) == {active} and frame.epoch.nunique() == 1
    assert list(frame.columns) == QUORUM_COLUMNS[1:]
    assert set(line(quorum_shell, "log_cluster", "status partitions").topic) == {topic_name}


def test_killing_the_active_controller_says_who_took_over_and_restart_brings_it_back(
        quorum_shell, topic_name, capsys, said):
    old, action, how = fault(quorum_shell, capsys, "kill controller")
    taken = re.fullmatch(r"it was the active controller; controller (\d) took over, epoch (\d+)",
                         how)
    assert action == "kill" and taken, how
    new, epoch = int(taken[1]), int(taken[2])
    others = " and ".join(str(i) for i in (1, 2, 3) if i != old)
    assert f"waiting for controllers {others} to elect a new active controller (up to 30 s)…" \
        in said
    frame = quorum(quorum_shell)
    assert frame.loc[old, "state"] == "down" and bool(frame.loc[new, "active"])
    assert frame.loc[new, "epoch"] == epoch
    line(quorum_shell, "log_produce", f"{topic_name} written-without-controller-{old}")
    with pytest.raises(UsageError, match=rf"^controller {old} is already down$"):
        line(quorum_shell, "log_cluster", f"kill controller {old}")

    assert fault(quorum_shell, capsys, "restart controller") == (
        old, "restart", f"a follower of controller {new}, caught up at committed offset "
                        f"{quorum(quorum_shell).loc[new, 'committed_offset']}")
    assert f"waiting for controller {old} to follow the active controller and catch up " \
           "(up to 30 s)…" in said
    frame = quorum(quorum_shell)
    assert frame.loc[old, "role"] == "follower" and frame.loc[old, "leader"] == new
    assert frame.committed_offset.nunique() == 1  # caught up with the leader


def test_a_follower_fault_names_the_controller_that_stays_active(quorum_shell, capsys):
    frame = quorum(quorum_shell)
    active = int(frame.index[frame.active][0])
    follower = next(i for i in (1, 2, 3) if i != active)
    assert fault(quorum_shell, capsys, f"kill controller {follower}") == (
        follower, "kill", f"not the active controller; controller {active} stays active")
    assert fault(quorum_shell, capsys, f"restart controller {follower}")[0] == follower
    assert bool(quorum(quorum_shell).loc[active, "active"])


@pytest.mark.parametrize(("stop", "restore", "state"), [
    ("pause", "resume", "paused"), ("isolate", "heal", "isolated")])
def test_pause_and_isolate_the_active_controller_then_undo_it(quorum_shell, capsys, stop,
                                                             restore, state):
    old, _action, how = fault(quorum_shell, capsys, f"{stop} controller")
    new = int(re.fullmatch(r"it was the active controller; controller (\d) took over, "
                           r"epoch \d+", how)[1])
    assert quorum(quorum_shell).loc[old, "state"] == state
    with pytest.raises(UsageError, match=rf"^controller {old} is already {state}$"):
        line(quorum_shell, "log_cluster", f"{stop} controller {old}")
    with pytest.raises(UsageError, match=rf"^controller {new} is up, not {state}$"):
        line(quorum_shell, "log_cluster", f"{restore} controller {new}")
    controller, action, how = fault(quorum_shell, capsys, f"{restore} controller")
    assert (controller, action) == (old, restore)
    assert how.startswith(f"a follower of controller {new}, caught up")
    capsys.readouterr()
    line(quorum_shell, "log_cluster", f"{restore} controller")
    assert capsys.readouterr().out == f"no controller is {state}: nothing to do\n"


def test_without_a_majority_no_controller_takes_over_and_faults_say_why(quorum_shell, capsys):
    first, _, _ = fault(quorum_shell, capsys, "kill controller")
    second, _, how = fault(quorum_shell, capsys, "kill controller")
    assert how == ("it was the active controller; no other can be elected: 1 other controller "
                   "up, a majority is 2")
    with pytest.raises(UsageError, match=r"^no controller is active \(controller \d \w+, "
                                          r"controller \d \w+, controller \d \w+\): name one$"):
        line(quorum_shell, "log_cluster", "kill controller")
    third = ({1, 2, 3} - {first, second}).pop()
    assert fault(quorum_shell, capsys, f"kill controller {third}") == (
        third, "kill", "not the active controller; no controller is active")
    capsys.readouterr()
    line(quorum_shell, "log_cluster", "restart controller")  # all three at once: none alone leads
    restarted = [CONTROLLER_DONE.match(s) for s in capsys.readouterr().out.splitlines()]
    assert [(int(m[1]), m[2]) for m in restarted if m] == [(1, "restart"), (2, "restart"),
                                                          (3, "restart")]
    frame = quorum(quorum_shell)
    assert set(frame.state) == {"up"} and frame.active.sum() == 1


REFUSALS = [
    ("kill controller 4", "controller 4 does not exist; controllers are [1, 2, 3]"),
    ("pause controller one", "'one' is not a controller id; controllers are [1, 2, 3]"),
    ("kill 2", "name a broker: one of [1], or controller [ID]"),
    ("kill 1 2", "kill takes one broker id, or controller [ID]"),
    ("status brokers", "status brokers: say status, status quorum or status partitions"),
]


def test_controller_refusals_are_one_line(quorum_shell):
    for text, message in REFUSALS:
        with pytest.raises(UsageError) as caught:
            line(quorum_shell, "log_cluster", text)
        assert str(caught.value) == message


def test_a_one_broker_cluster_runs_under_one_controller(shell):
    frame = quorum(shell)
    assert list(frame.reset_index().columns) == QUORUM_COLUMNS
    assert list(frame.index) == [1] and bool(frame.active.iloc[0])
    assert set(frame.state) == {"up"}
    with pytest.raises(UsageError, match=r"^controller 2 does not exist; controllers are \[1\]$"):
        line(shell, "log_cluster", "kill controller 2")


# == %%log_txn and transaction() ================================================================


def last_line(capsys) -> str:
    """What a cell printed last (a wait's status line may come first, outside a notebook)."""
    return capsys.readouterr().out.strip().splitlines()[-1]


def values(shell, topic: str, isolation: str) -> list[str]:
    return list(line(shell, "log_consume", f"{topic} --isolation {isolation}").value)


def test_log_txn_commits_a_cell_across_two_topics_and_says_so(shell, topic_name, capsys):
    audit, txn_id = f"{topic_name}-audit", f"shop-{topic_name}"
    written = shell.run_cell_magic("log_txn", f"{topic_name} --id {txn_id} -s :",
                                   "alice:book\nbob:pen\n\n[" + audit + "]\nalice:ordered\n")
    summary = last_line(capsys)
    assert re.fullmatch(rf"committed 3 records to {topic_name}, {audit} "
                        r"\(producer id \d+, epoch 0\)", summary), summary
    assert list(written[["topic", "offset", "key", "value"]].itertuples(index=False)) == [
        (topic_name, 0, "alice", "book"), (topic_name, 1, "bob", "pen"),
        (audit, 0, "alice", "ordered")]
    consumed = line(shell, "log_consume", topic_name)  # read_committed, the default
    assert list(consumed.value) == ["book", "pen"]
    assert values(shell, audit, "read_committed") == ["ordered"]
    shell.run_cell_magic("log_txn", f"{topic_name} --id {txn_id}", "after\n")
    assert re.fullmatch(rf"committed 1 record to {topic_name} \(producer id \d+, epoch 1\)",
                        last_line(capsys))  # a new producer: the next epoch
    # offset 2 is the first transaction's commit marker: no reader gets it
    assert list(line(shell, "log_consume", topic_name).offset) == [0, 1, 3]


def test_log_txn_abort_leaves_records_only_read_uncommitted_sees(shell, topic_name, capsys):
    written = shell.run_cell_magic("log_txn", f"{topic_name} --abort --id a-{topic_name}",
                                   "never\nseen\n")
    assert re.fullmatch(rf"aborted 2 records to {topic_name} \(producer id \d+, epoch 0\)",
                        last_line(capsys))
    assert list(written.offset) == [0, 1]
    assert values(shell, topic_name, "read_committed") == []
    assert values(shell, topic_name, "read_uncommitted") == ["never", "seen"]


def test_log_txn_aborts_the_whole_cell_when_a_record_fails(shell, topic_name):
    with pytest.raises(UsageError, match=r"^aborted, nothing committed: 1 of 2 records failed: "
                                         r"Broker: Invalid topic$"):
        shell.run_cell_magic("log_txn", f"{topic_name} --id f-{topic_name}",
                             "written\n[bad/name]\nrefused\n")
    assert values(shell, topic_name, "read_committed") == []
    assert values(shell, topic_name, "read_uncommitted") == ["written"]


def test_transaction_commits_at_the_end_of_its_block_and_aborts_on_an_exception(shell,
                                                                                 topic_name):
    bootstrap = shell.magics_manager.registry["LogMagics"]._target()
    with transaction(bootstrap, f"cm-{topic_name}") as txn:
        txn.produce(topic_name, "kept", key="k")
    assert txn.outcome == "committed"
    with pytest.raises(ZeroDivisionError), transaction(bootstrap, f"cm-{topic_name}") as failed:
        failed.produce(topic_name, "dropped")
        _ = 1 / 0
    assert failed.outcome == "aborted"
    with pytest.raises(LogClientError, match="the transaction is aborted: open a new one"):
        failed.produce(topic_name, "late")
    assert values(shell, topic_name, "read_committed") == ["kept"]
    assert values(shell, topic_name, "read_uncommitted") == ["kept", "dropped"]


def test_a_bad_log_txn_cell_writes_nothing(shell, topic_name):
    with pytest.raises(UsageError, match="^name a topic"):
        shell.run_cell_magic("log_txn", "--id bad", "orphan\n")
    with pytest.raises(UsageError, match="has no separator"):
        shell.run_cell_magic("log_txn", f"{topic_name} -s :", "a:1\nno separator\n")
    with pytest.raises(UsageError, match="^no records"):
        shell.run_cell_magic("log_txn", topic_name, "\n")
    shell.run_cell_magic("log_produce", topic_name, "plain\n")
    assert values(shell, topic_name, "read_uncommitted") == ["plain"]
