"""The %log_* magics in a real IPython shell, against real broker processes."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from pylog_nb import LocalCluster


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "pylog_nb")
    data_dir = tmp_path_factory.mktemp("magics")
    ipython.run_line_magic("log_cluster", f"start --brokers 1 --data-dir {data_dir}")
    yield ipython
    ipython.run_line_magic("log_cluster", "stop")


def line(shell, magic: str, text: str = ""):
    return shell.run_line_magic(magic, text)


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


def test_errors_are_one_line(shell, topic_name):
    with pytest.raises(UsageError, match=r"^no-such-topic: .*Unknown topic"):
        line(shell, "log_consume", "no-such-topic")
    with pytest.raises(UsageError, match=r"name a broker: one of \[1\]"):
        line(shell, "log_cluster", "kill 9")
    with pytest.raises(UsageError, match="invalid choice"):
        line(shell, "log_cluster", "explode")
    with pytest.raises(UsageError, match="already in use"):
        line(shell, "log_cluster", "start")
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


def test_connect_to_another_cluster(tmp_path, topic_name):
    ipython = InteractiveShell.instance()
    with LocalCluster(brokers=1, data_dir=tmp_path) as other:
        magics = ipython.magics_manager.registry["LogMagics"]
        saved = magics.cluster, magics.bootstrap
        magics.cluster = magics.bootstrap = None
        try:
            line(ipython, "log_cluster", f"connect {other.bootstrap_servers}")
            line(ipython, "log_produce", f"{topic_name} elsewhere")
            assert list(line(ipython, "log_consume", topic_name).value) == ["elsewhere"]
            with pytest.raises(UsageError, match="needs a local cluster"):
                line(ipython, "log_cluster", "status")
        finally:
            magics.cluster, magics.bootstrap = saved


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
