"""Client byte-rate quotas, ClientQuotaManager's semantics: Kafka's entity precedence, whose
rate is shared, the sampled rate and its window, throttle times, muting, and updates."""

from __future__ import annotations

import pytest

from pylog_nb.broker.security.quotas import (
    CONSUMER_BYTE_RATE,
    MAX_THROTTLE_TIME_MS,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    ClientQuotas,
    Rate,
    quota_entity,
    throttle_time_ms,
    user_of,
)

ALICE, BOB = "User:alice", "User:bob"
QUOTA = 1000.0  # bytes/s
FIRST_WINDOW_MS = 10_000  # a fresh rate is taken over quota.window.num - 1 windows


def produce(quotas: dict) -> ClientQuotaManager:
    return ClientQuotaManager(PRODUCER_BYTE_RATE, quotas)


def test_entities_and_principals():
    assert quota_entity(user="alice", client_id=None) == frozenset(
        {("user", "alice"), ("client-id", None)})
    assert quota_entity(client_id="app") == frozenset({("client-id", "app")})
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"
    assert user_of("alice") == "alice"


def test_precedence_is_kafkas():
    """Each entity in turn is the most specific one left: removing it reveals the next."""
    order = [quota_entity(user="alice", client_id="app"),
             quota_entity(user="alice", client_id=None),
             quota_entity(user="alice"),
             quota_entity(user=None, client_id="app"),
             quota_entity(user=None, client_id=None),
             quota_entity(user=None),
             quota_entity(client_id="app"),
             quota_entity(client_id=None)]
    configs = {entity: {PRODUCER_BYTE_RATE: 100.0 * (i + 1)} for i, entity in enumerate(order)}
    for i, entity in enumerate(order):
        manager = produce(configs)
        assert manager.quota(ALICE, "app") == 100.0 * (i + 1), entity
        del configs[entity]
    assert produce(configs).quota(ALICE, "app") is None


def test_other_users_and_clients_do_not_take_anothers_quota():
    manager = produce({quota_entity(user="alice", client_id="app"): {PRODUCER_BYTE_RATE: 10},
                       quota_entity(user="alice"): {PRODUCER_BYTE_RATE: 20},
                       quota_entity(client_id="app"): {PRODUCER_BYTE_RATE: 30}})
    assert manager.quota(ALICE, "app") == 10
    assert manager.quota(ALICE, "other") == 20
    assert manager.quota(BOB, "app") == 30
    assert manager.quota(BOB, "other") is None


def test_each_quota_type_reads_its_own_key():
    quotas = ClientQuotas({quota_entity(user="alice"): {PRODUCER_BYTE_RATE: 10,
                                                        CONSUMER_BYTE_RATE: 20}})
    assert quotas.produce.quota(ALICE, "c") == 10
    assert quotas.fetch.quota(ALICE, "c") == 20
    only_fetch = ClientQuotas({quota_entity(user="alice"): {CONSUMER_BYTE_RATE: 20}})
    assert only_fetch.produce.quota(ALICE, "c") is None


def test_invalid_configs_are_refused_valid_others_ignored():
    with pytest.raises(ValueError, match="unknown quota config"):
        produce({quota_entity(user="alice"): {"producer_rate": 10}})
    with pytest.raises(ValueError, match="positive"):
        produce({quota_entity(user="alice"): {PRODUCER_BYTE_RATE: 0}})
    with pytest.raises(ValueError, match="positive"):
        produce({quota_entity(user="alice"): {PRODUCER_BYTE_RATE: "10"}})
    with pytest.raises(ValueError, match="invalid quota entity"):
        produce({quota_entity(group="g"): {PRODUCER_BYTE_RATE: 10}})
    with pytest.raises(ValueError, match="invalid quota entity"):
        produce({(): {PRODUCER_BYTE_RATE: 10}})
    with pytest.raises(ValueError):
        ClientQuotaManager(REQUEST_PERCENTAGE)
    manager = produce({quota_entity(user="alice"): {REQUEST_PERCENTAGE: 50.0},
                       quota_entity(ip="10.0.0.1"): {"connection_creation_rate": 5},
                       quota_entity(ip=None): {"connection_creation_rate": 5}})
    assert manager.quota(ALICE, "c") is None  # request_percentage kept valid, not enforced
    # entities given as plain tuples of (type, name) pairs work as well
    assert produce({(("user", "alice"),): {PRODUCER_BYTE_RATE: 7}}).quota(ALICE, "c") == 7


# -- the rate -------------------------------------------------------------------------------------


def test_a_fresh_rate_is_taken_over_ten_windows():
    rate = Rate()
    assert rate.measure(0) == 0
    rate.record(20_000, 0)
    assert rate.window_length_ms(0) == FIRST_WINDOW_MS
    assert rate.measure(0) == 2000
    assert rate.measure(5_000) == 2000
    assert rate.window_length_ms(10_500) == 10_500  # more than ten windows: the time spanned


def test_samples_expire_after_the_whole_window():
    rate = Rate()
    rate.record(20_000, 0)
    rate.record(1, 10_999)
    assert rate.measure(10_999) == pytest.approx(20_001 * 1000 / 10_999)
    rate.record(1, 11_000)  # the first sample is now 11 windows old: gone
    # the oldest sample left began 1 ms ago: ten more windows are assumed
    assert rate.window_length_ms(11_000) == 1 + FIRST_WINDOW_MS
    assert rate.measure(11_000) == pytest.approx(2 * 1000 / (1 + FIRST_WINDOW_MS))
    assert rate.measure(30_000) == 0


def test_a_steady_rate_measures_itself():
    rate = Rate()
    for second in range(30):
        rate.record(1500, second * 1000)
    # the 11 samples (seconds 19..29) over the 10 s since the oldest began
    assert rate.measure(29_000) == pytest.approx(11 * 1500 / 10)
    assert rate.measure(29_999) == pytest.approx(11 * 1500 * 1000 / 10_999)


def test_throttle_time_formula():
    assert throttle_time_ms(100, 50, 2000) == 2000  # Kafka's own example
    assert throttle_time_ms(2000, 1000, FIRST_WINDOW_MS) == 10_000
    assert throttle_time_ms(1000, 1000, FIRST_WINDOW_MS) == 0
    assert throttle_time_ms(999, 1000, FIRST_WINDOW_MS) == 0
    assert throttle_time_ms(10_000, 1000, FIRST_WINDOW_MS) == MAX_THROTTLE_TIME_MS
    assert throttle_time_ms(10_000, 1000, FIRST_WINDOW_MS, None) == 90_000


# -- recording and throttling ---------------------------------------------------------------------


def alice_quota() -> ClientQuotaManager:
    return produce({quota_entity(user="alice"): {PRODUCER_BYTE_RATE: QUOTA}})


def test_no_throttle_within_the_quota():
    manager = alice_quota()
    for second in range(30):
        assert manager.record(ALICE, "app", QUOTA * 0.9, second * 1000) == 0
    assert manager.throttled_until(ALICE, "app") == 0
    # a new client's first burst is averaged over ten windows: 5 kB is 500 B/s
    assert alice_quota().record(ALICE, "app", 5_000, 0) == 0


def test_a_producer_twice_over_its_quota_is_throttled_for_the_window():
    manager = alice_quota()
    # 20 kB at once: 2000 B/s over the first ten seconds, twice the quota
    throttle = manager.record(ALICE, "app", 2 * QUOTA * FIRST_WINDOW_MS / 1000, 0)
    assert throttle == (2 * QUOTA - QUOTA) / QUOTA * FIRST_WINDOW_MS == 10_000
    assert manager.throttled_until(ALICE, "app") == 10_000
    assert manager.throttled_until(ALICE, "other-app") == 0


def test_a_steady_producer_twice_over_is_throttled():
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE,
                                 {quota_entity(user="alice"): {PRODUCER_BYTE_RATE: QUOTA}},
                                 max_throttle_time_ms=None)
    throttles = [manager.record(ALICE, "app", 2 * QUOTA, second * 1000) for second in range(20)]
    assert throttles[:5] == [0] * 5  # at 4 s, 10 kB over the first ten windows: the quota
    assert throttles[5] == round((1200 - QUOTA) / QUOTA * FIRST_WINDOW_MS) == 2000
    # once the rate spans all its samples: 11 * 2 kB over 10 s, 2200 B/s
    assert throttles[-1] == round((2200 - QUOTA) / QUOTA * 10_000) == 12_000
    bounded = alice_quota()
    for second in range(20):
        last = bounded.record(ALICE, "app", 2 * QUOTA, second * 1000)
    assert last == MAX_THROTTLE_TIME_MS


def test_the_window_slides_old_samples_expire():
    manager = alice_quota()
    assert manager.record(ALICE, "app", 20_000, 0) == 10_000
    assert manager.record(ALICE, "app", 1, 5_000) > 0  # still within the window
    assert manager.record(ALICE, "app", 1, 16_000) == 0  # the burst's samples have expired
    assert manager.throttled_until(ALICE, "app") > 5_000


def test_unrecord_takes_bytes_back():
    manager = ClientQuotaManager(CONSUMER_BYTE_RATE,
                                 {quota_entity(user="alice"): {CONSUMER_BYTE_RATE: QUOTA}})
    assert manager.record(ALICE, "app", 20_000, 0) > 0
    manager.unrecord(ALICE, "app", 20_000, 0)
    assert manager.record(ALICE, "app", 1_000, 1) == 0


def test_who_shares_a_rate():
    # a quota of the user alone: all the user's clients share one rate
    user_wide = alice_quota()
    assert user_wide.record(ALICE, "a", 9_000, 0) == 0
    assert user_wide.record(ALICE, "b", 9_000, 0) > 0
    # the default user: each user (and client) their own rate
    defaults = produce({quota_entity(user=None, client_id=None): {PRODUCER_BYTE_RATE: QUOTA}})
    assert defaults.record(ALICE, "a", 9_000, 0) == 0
    assert defaults.record(ALICE, "b", 9_000, 0) == 0
    assert defaults.record(BOB, "a", 9_000, 0) == 0
    assert defaults.record(BOB, "a", 9_000, 0) > 0
    # a client id's quota: shared by every user of that client id
    client_wide = produce({quota_entity(client_id="app"): {PRODUCER_BYTE_RATE: QUOTA}})
    assert client_wide.record(ALICE, "app", 9_000, 0) == 0
    assert client_wide.record(BOB, "app", 9_000, 0) > 0
    # no quota: nothing recorded, never throttled
    unlimited = produce({})
    assert unlimited.record(ALICE, "app", 10**12, 0) == 0
    assert unlimited.max_value_in_quota_window(ALICE, "app") is None


def test_max_value_in_quota_window():
    assert alice_quota().max_value_in_quota_window(ALICE, "app") == QUOTA


def test_updates_keep_rates_and_change_quotas():
    manager = alice_quota()
    assert manager.record(ALICE, "app", 9_000, 0) == 0
    manager.update({quota_entity(user="alice"): {PRODUCER_BYTE_RATE: QUOTA / 2}})
    assert manager.record(ALICE, "app", 1, 1) > 0  # the 9 kB still count, against 500 B/s
    manager.update({})
    assert manager.record(ALICE, "app", 10**9, 2) == 0


def test_idle_clients_are_forgotten():
    manager = alice_quota()
    manager.record(ALICE, "app", 20_000, 0)
    manager.expire_idle(3_600_000)
    assert manager.throttled_until(ALICE, "app") == 0
    assert manager.record(ALICE, "app", 5_000, 3_600_001) == 0
