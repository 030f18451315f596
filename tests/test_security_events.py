"""Refusals reach the introspection stream and the live view's timeline, one per host and
second however hard a client keeps failing."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pylog_nb.broker.security.events import AuthenticationFailed, RefusalThrottle
from pylog_nb.widgets.snapshot import EVENT_CATEGORIES


def test_a_refused_sign_in_is_an_event_in_the_security_category(cluster):
    admin = AdminClient({**cluster.client_config(), "sasl.password": "guess", "log_level": 0})
    try:
        admin.list_topics(timeout=3)
    except KafkaException:  # refused, as it must be
        pass
    refusals = [e for e in cluster.events() if e["kind"] == "AuthenticationFailed"]
    assert refusals and "authentication failed" in refusals[-1]["text"]
    assert EVENT_CATEGORIES["AuthenticationFailed"] == "security"


def test_refusal_events_are_rate_limited_per_host():
    throttle = RefusalThrottle(interval_ms=1_000)
    admitted = [throttle.admit(("10.0.0.1", "authentication"), now_ms)
                for now_ms in (0, 10, 500, 999, 1_000, 1_500, 2_001)]
    assert admitted == [True, False, False, False, True, False, True]
    assert throttle.admit(("10.0.0.2", "authentication"), 10)
    event = AuthenticationFailed(5, "10.0.0.1", "authentication failed: bad proof")
    assert event.text == "a client at 10.0.0.1 was refused: authentication failed: bad proof"
