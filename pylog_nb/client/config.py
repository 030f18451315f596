"""What every Kafka client of this package shares: its settings, its failover retry, markers.

Light on purpose (confluent-kafka only, no pandas): the Spark source's Python workers import it,
and a streaming query starts a fresh interpreter for its planning worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from ..cluster.credentials import client_settings

FAILOVER_WAIT_S = 20.0  # a leader or coordinator election takes about 3 s here
FAILOVER_BACKOFF_S = 0.25
# Answers that mean "ask again in a moment" while a leader or a group coordinator moves, and
# that librdkafka hands back to the caller of an admin or watermark query instead of retrying.
FAILOVER_ERRORS = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
})
# Committed offsets whose metadata starts with this were committed by a Spark query (the pylog
# source's kafka.group.id): "spark-query pylog subscribe=orders, started 2026-...Z".
SPARK_QUERY_MARKER = "spark-query"

T = TypeVar("T")
# librdkafka's own log lines (a refused connection to a killed broker...) go to Python logging,
# not into the notebook's output: failures reach the user as LogClientError.
CLIENT_LOG = logging.getLogger("pylog.client")
CLIENT_LOG.addHandler(logging.NullHandler())  # silent unless the application configures logging


def client_config(bootstrap: str, **settings) -> dict:
    """Settings every client of this package uses: for a local cluster of this account, its
    owner's credentials too (``cluster/credentials.py``)."""
    return {"bootstrap.servers": bootstrap, "logger": CLIENT_LOG,
            **client_settings(bootstrap), **settings}


def through_failover(ask: Callable[[], T], wait_s: float = FAILOVER_WAIT_S) -> T:
    """``ask()``, asked again while it fails with an error that a failover causes and heals."""
    deadline_s = time.monotonic() + wait_s
    while True:
        try:
            return ask()
        except KafkaException as error:
            if error.args[0].code() not in FAILOVER_ERRORS or time.monotonic() > deadline_s:
                raise
        time.sleep(FAILOVER_BACKOFF_S)
