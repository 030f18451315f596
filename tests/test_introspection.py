"""The introspection endpoint reports the offsets and segments the log really has."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from clients import create_topic, produce

from pylog_nb.client import partitions_frame


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


def test_unknown_path_and_method(cluster):
    base = cluster.admin_urls()[1]
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"{base}/nope", timeout=10)
    assert raised.value.code == 404
    assert "/v1/partitions" in json.loads(raised.value.read())["paths"]
    request = urllib.request.Request(f"{base}/v1/partitions", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 405


def test_admin_endpoint_listens_on_loopback_only(cluster):
    assert cluster.admin_urls()[1].startswith("http://127.0.0.1:")
