"""The introspection endpoint reports the offsets and segments the log really has, and
partitions_frame and the live view's snapshot set each replica's own view beside the
controller's: an isolated leader shows as a stale claim until it is healed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin, create_topic, kafka_conf, produce, wait_for

from pylog_nb import LocalCluster
from pylog_nb.client import partitions_frame
from pylog_nb.widgets import take_snapshot
from pylog_nb.widgets.render import render_partitions


def test_describe_reports_offsets_and_segments(cluster, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2,
                 config={"segment.bytes": "1024"})
    produce(cluster.bootstrap_servers, topic_name, [(None, b"x" * 200) for _ in range(30)],
            partition=1, **{"linger.ms": 0, "batch.num.messages": 1})
    rows = {p["partition"]: p for p in cluster.describe()[1] if p["topic"] == topic_name}
    assert rows[0]["log_end_offset"] == 0 and rows[0]["high_watermark"] == 0
    assert rows[1]["log_end_offset"] == 30 and rows[1]["high_watermark"] == 30
    assert rows[1]["leader"] == 1 and rows[1]["isr"] == [1]
    assert len(rows[1]["segments"]) > 1  # 1 KiB segments rolled
    assert rows[1]["segments"][0]["base_offset"] == 0
    frame = partitions_frame(cluster)
    mine = frame[frame.topic == topic_name].set_index("partition")
    assert mine.loc[1, "log_end_offset"] == 30
    # One broker has no controller process: its own view is the truth, and agrees with itself.
    assert mine.loc[1, "controller_leader"] == 1 and mine.loc[1, "controller_isr"] == [1]
    assert list(mine.disagreement) == ["", ""]


def test_unknown_path_and_method(cluster):
    base = cluster.admin_urls()[1]
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(urllib.request.Request(f"{base}/nope",
                                                      headers=cluster.admin_headers()), timeout=10)
    assert raised.value.code == 404
    assert "/v1/partitions" in json.loads(raised.value.read())["paths"]
    request = urllib.request.Request(f"{base}/v1/partitions", method="POST", data=b"{}",
                                     headers=cluster.admin_headers())
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 405


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic x", "Bearer"])
def test_admin_endpoint_refuses_requests_without_the_token(cluster, authorization):
    """Every path, GET and POST, answers 401 without the cluster's token, and a refused fault
    changes nothing."""
    base = cluster.admin_urls()[1]
    headers = {} if authorization is None else {"Authorization": authorization}
    for path, method in (("/v1/partitions", "GET"), ("/v1/groups", "GET"),
                         ("/v1/faults/isolate", "POST"), ("/nope", "GET")):
        request = urllib.request.Request(f"{base}{path}", method=method, headers=headers,
                                         data=b"" if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=10)
        assert raised.value.code == 401, path
    assert cluster.broker_states() == {1: "up"}


def test_admin_endpoint_listens_on_loopback_only(cluster):
    assert cluster.admin_urls()[1].startswith("http://127.0.0.1:")


@pytest.fixture
def three(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path) as cluster:
        yield cluster


def test_an_isolated_leader_is_a_stale_claim_beside_the_controllers_leader_until_healed(
        three, topic_name):
    """The broker coordinating a group and leading a partition is isolated: it goes on claiming
    both at its old epoch. The frame names the stale leadership beside the controller's new
    leader, the view shows one leader and one row for the group, and healing ends it."""
    client = admin(three.bootstrap_servers)
    client.create_topics([NewTopic(topic_name, 3, 3)])[topic_name].result(TIMEOUT_S)
    group = f"g-{topic_name}"
    _commit(three, group, topic_name)
    [claim] = _claims(three, group)
    isolated = claim["coordinator"]
    index = next(i for i, p in enumerate(_controller_partitions(three, topic_name))
                 if p["leader"] == isolated)  # each of three brokers leads one of 3 partitions
    three.isolate(isolated)
    wait_for(lambda: _controller_partitions(three, topic_name)[index]["leader"] != isolated,
             "the controller to elect another leader")
    new = _controller_partitions(three, topic_name)[index]
    wait_for(lambda: _row(three, new["leader"], topic_name, index)["disagreement"] == ""
             and len(_claims(three, group)) == 2,
             "the new leader to act and the new coordinator to load the group")

    row = _row(three, isolated, topic_name, index)
    assert row["role"] == "leader" and row["controller_leader"] == new["leader"]
    assert row["controller_leader_epoch"] == new["leader_epoch"] > row["leader_epoch"]
    assert row["disagreement"] == (
        f"stale leader: acts as leader at epoch {row['leader_epoch']}, controller: broker "
        f"{new['leader']} leads at epoch {new['leader_epoch']}; isolated broker still claims "
        "leadership")

    snapshot = take_snapshot(three)
    [partition] = [p for p in snapshot["partitions"]
                   if (p["topic"], p["partition"]) == (topic_name, index)]
    assert (partition["leader"], partition["leader_epoch"]) == (new["leader"], new["leader_epoch"])
    claimed = {b: r["disagreement"] for b, r in partition["replicas"].items()
               if r["role"] == "leader"}
    assert claimed[new["leader"]] == "" and claimed[isolated].startswith("stale leader")
    html = render_partitions({**snapshot, "partitions": [partition]})
    assert html.count("★ leader") == 1
    assert f"claims leader (stale epoch {row['leader_epoch']})" in html
    [shown] = [g for g in snapshot["groups"] if g["group"] == group]
    assert shown["coordinator"] != isolated and shown["stale_coordinators"] == [isolated]
    assert shown["disagreement"].startswith(f"broker {isolated} still claims it (stale)")

    three.heal(isolated)
    wait_for(lambda: (partitions_frame(three).disagreement == "").all()
             and len(_claims(three, group)) == 1, "every replica to agree with the controller")
    [shown] = [g for g in take_snapshot(three)["groups"] if g["group"] == group]
    assert shown["stale_coordinators"] == [] and shown["disagreement"] == ""


def _commit(cluster: LocalCluster, group: str, topic: str) -> None:
    consumer = Consumer({**kafka_conf(cluster.bootstrap_servers), "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()


def _claims(cluster: LocalCluster, group: str) -> list[dict]:
    """Every broker's claim to coordinate ``group``."""
    return [g for g in cluster.groups() if g["group"] == group]


def _controller_partitions(cluster: LocalCluster, topic: str) -> list[dict]:
    return next(t["partitions"] for t in cluster.controller_describe()["topics"]
                if t["name"] == topic)


def _row(cluster: LocalCluster, broker_id: int, topic: str, index: int) -> dict:
    frame = partitions_frame(cluster)
    [row] = frame[(frame.broker == broker_id) & (frame.topic == topic)
                  & (frame.partition == index)].to_dict("records")
    return row
