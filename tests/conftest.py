"""Shared fixtures: a real broker process per test module, and real clients pointed at it."""

from __future__ import annotations

import uuid

import pytest

from pylog_nb import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("cluster")) as running:
        yield running


@pytest.fixture
def bootstrap(cluster) -> str:
    return cluster.bootstrap_servers


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
