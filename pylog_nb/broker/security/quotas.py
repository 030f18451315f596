"""Client byte-rate quotas with the semantics of Kafka's ``ClientQuotaManager``, sans-IO.

Theory of operation: the image's client quotas (``ClientQuota`` records, Kafka's
``ClientQuotaRecord``) map an entity to configs. An entity is a set of (type, name) parts,
``user`` and/or ``client-id``; a name of None is that type's default (``<default>`` in Kafka's
old ZooKeeper paths). ``quota_entity(user="alice", client_id=None)`` builds one.

- The quota of a request is the most specific entity's that has one, in Kafka's order for a
  user U and a client id C: (U, C), (U, default client), U alone, (default user, C),
  (default user, default client), default user alone, C alone, default client alone. Without
  any, the client is unlimited.
- What the rate is measured for follows Kafka's metric tags: an entity naming the user alone
  shares one rate among all the user's clients; one naming a client alone shares it among all
  users of that client id; otherwise each (user, client id) pair has its own rate. A default
  gives each user (or client id) its own rate, never one for all.
- A ``Rate`` is Kafka's sampled rate: ``quota.window.num`` (11) samples of
  ``quota.window.size.seconds`` (1 s); the bytes of the unexpired samples over the time they
  span, never less than ten windows (so a first burst is averaged over ten seconds).
- ``record`` adds a response's (or request's) bytes and, when the rate is over the quota,
  returns the throttle time Kafka computes: (rate - quota) / quota * the rate's window, rounded.
  It is at most ``MAX_THROTTLE_TIME_MS`` (the whole quota window) by default; Kafka bounds only
  its request-time and connection throttles so, and a manager made with
  ``max_throttle_time_ms=None`` leaves byte-rate throttles unbounded as Kafka does. KIP-219: the
  response carries ``throttle_time_ms`` at once, and the broker reads nothing more from that
  connection until ``throttled_until``.
- A fetch that is throttled is answered empty: ``unrecord`` takes its bytes back.

One ``ClientQuotaManager`` per quota type (produce, fetch); ``ClientQuotas`` holds both. Time is
the caller's ``now_ms``; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"  # connection-rate quotas: not this module's
PRODUCER_BYTE_RATE = "producer_byte_rate"  # bytes/s a client may produce
CONSUMER_BYTE_RATE = "consumer_byte_rate"  # bytes/s a client may fetch
REQUEST_PERCENTAGE = "request_percentage"  # valid, not enforced yet
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"  # valid, not enforced yet
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE,
              CONTROLLER_MUTATION_RATE)
QUOTA_WINDOW_NUM = 11  # quota.window.num
QUOTA_WINDOW_SIZE_MS = 1000  # quota.window.size.seconds, in ms
MAX_THROTTLE_TIME_MS = QUOTA_WINDOW_NUM * QUOTA_WINDOW_SIZE_MS  # the default throttle bound
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000  # Kafka drops a client's rate idle this long

QuotaEntity = frozenset[tuple[str, "str | None"]]  # {(type, name or None for the default)}
QuotaConfigs = Mapping[Iterable[tuple[str, "str | None"]], Mapping[str, float]]


def quota_entity(**parts: str | None) -> QuotaEntity:
    """An entity from keyword parts, ``user`` and ``client_id``; None is the default."""
    return frozenset((CLIENT_ID if kind == "client_id" else kind, name)
                     for kind, name in parts.items())


def user_of(principal: str) -> str:
    """The user a quota names: the principal's name (``User:alice`` -> ``alice``)."""
    kind, colon, name = principal.partition(":")
    return name if colon else kind


def _precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """Kafka's entities for (user, client id), most specific first, each with the key of the
    rate it is measured by (user or "", client id or "")."""
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    return [
        (quota_entity(user=user, client_id=client_id), both),
        (quota_entity(user=user, client_id=None), both),
        (quota_entity(user=user), user_only),
        (quota_entity(user=None, client_id=client_id), both),
        (quota_entity(user=None, client_id=None), both),
        (quota_entity(user=None), user_only),
        (quota_entity(client_id=client_id), client_only),
        (quota_entity(client_id=None), client_only),
    ]


def validate_configs(entity: QuotaEntity, configs: Mapping[str, float]) -> None:
    """Raise ValueError unless the entity and its configs are a valid user/client quota."""
    kinds = [kind for kind, _ in entity]
    if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= {USER, CLIENT_ID}:
        raise ValueError(f"invalid quota entity {sorted(entity, key=str)}")
    for key, value in configs.items():
        if key not in QUOTA_KEYS:
            raise ValueError(f"unknown quota config {key!r}: one of {QUOTA_KEYS}")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"quota {key} must be a positive number, not {value!r}")


@dataclass
class _Sample:
    start_ms: int
    value: float = 0.0


class Rate:
    """Kafka's sampled rate (``Rate`` over ``SampledStat``), in units per second."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM,
                 window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        self.samples, self.window_ms = samples, window_ms
        self._ring: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        sample = self._ring[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        self.last_record_ms = now_ms

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.samples
        if self._current == len(self._ring):
            self._ring.append(_Sample(now_ms))
        else:
            self._ring[self._current] = _Sample(now_ms)
        return self._ring[self._current]

    def _purge(self, now_ms: int) -> None:
        """Samples older than all the windows start over, empty, now."""
        for i, sample in enumerate(self._ring):
            if now_ms - sample.start_ms >= self.samples * self.window_ms:
                self._ring[i] = _Sample(now_ms)

    def window_length_ms(self, now_ms: int) -> int:
        """The time the rate is taken over: since the oldest sample, at least samples - 1
        windows (and at least one)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._ring), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, self.window_ms)

    def measure(self, now_ms: int) -> float:
        """Units per second over the window."""
        length = self.window_length_ms(now_ms)  # purges first
        return sum(s.value for s in self._ring) * 1000 / length


def throttle_time_ms(rate: float, quota: float, window_ms: int,
                     bound_ms: int | None = MAX_THROTTLE_TIME_MS) -> int:
    """Kafka's throttle for a rate over its quota: long enough to bring the rate down to it
    over the window; 0 within it; at most ``bound_ms`` (None: unbounded)."""
    if rate <= quota:
        return 0
    throttle = round((rate - quota) / quota * window_ms)
    return throttle if bound_ms is None else min(throttle, bound_ms)


class ClientQuotaManager:
    """One quota type's quotas (``PRODUCER_BYTE_RATE`` or ``CONSUMER_BYTE_RATE``) and rates."""

    def __init__(self, quota_type: str, quotas: QuotaConfigs | None = None, *,
                 samples: int = QUOTA_WINDOW_NUM,
                 window_ms: int = QUOTA_WINDOW_SIZE_MS,
                 max_throttle_time_ms: int | None = MAX_THROTTLE_TIME_MS) -> None:
        if quota_type not in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE):
            raise ValueError(f"not a byte-rate quota type: {quota_type!r}")
        self.quota_type = quota_type
        self.samples, self.window_ms = samples, window_ms
        self.max_throttle_time_ms = max_throttle_time_ms
        self._quotas: dict[QuotaEntity, float] = {}
        self._rates: dict[tuple[str, str], Rate] = {}
        self._throttled_until: dict[tuple[str, str], int] = {}
        self.update(quotas or {})

    def update(self, quotas: QuotaConfigs) -> None:
        """Replace the quotas (the image's client quotas changed); rates carry on."""
        wanted: dict[QuotaEntity, float] = {}
        for parts, configs in quotas.items():
            entity = frozenset(parts)
            if IP in {kind for kind, _ in entity}:
                continue  # a connection-rate quota (connection_creation_rate)
            validate_configs(entity, configs)
            if self.quota_type in configs:
                wanted[entity] = float(configs[self.quota_type])
        self._quotas = wanted

    def _lookup(self, principal: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        for entity, key in _precedence(user_of(principal), client_id):
            quota = self._quotas.get(entity)
            if quota is not None:
                return quota, key
        return None

    def quota(self, principal: str, client_id: str) -> float | None:
        """The bytes/s this client may use, or None when unlimited."""
        found = self._lookup(principal, client_id)
        return None if found is None else found[0]

    def record(self, principal: str, client_id: str, value: float, now_ms: int) -> int:
        """Count ``value`` bytes now; the throttle time (ms) the response carries, 0 when the
        client is within its quota."""
        if not self._quotas:  # the common case: no quota at all, nothing to measure
            return 0
        found = self._lookup(principal, client_id)
        if found is None:
            return 0
        quota, key = found
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = Rate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        throttle = throttle_time_ms(rate.measure(now_ms), quota, rate.window_length_ms(now_ms),
                                    self.max_throttle_time_ms)
        if throttle:
            caller = (user_of(principal), client_id)
            until = now_ms + throttle
            self._throttled_until[caller] = max(self._throttled_until.get(caller, 0), until)
        return throttle

    def unrecord(self, principal: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back bytes recorded and not sent (a throttled fetch is answered empty)."""
        found = self._lookup(principal, client_id)
        if found is not None and found[1] in self._rates:
            self._rates[found[1]].record(-value, now_ms)

    def throttled_until(self, principal: str, client_id: str) -> int:
        """Until when (ms) the client's connections stay muted; 0 if never throttled."""
        return self._throttled_until.get((user_of(principal), client_id), 0)

    def max_value_in_quota_window(self, principal: str, client_id: str) -> float | None:
        """The most bytes a client may take in one window (Kafka bounds a fetch by it), or
        None when unlimited."""
        quota = self.quota(principal, client_id)
        return None if quota is None else quota * self.window_ms / 1000

    def expire_idle(self, now_ms: int) -> None:
        """Forget the rates (and throttles) of clients idle for an hour, as Kafka does."""
        cutoff = now_ms - INACTIVE_SENSOR_EXPIRATION_MS
        self._rates = {k: r for k, r in self._rates.items() if r.last_record_ms > cutoff}
        self._throttled_until = {k: t for k, t in self._throttled_until.items() if t > now_ms}


class ClientQuotas:
    """The broker's produce and fetch byte-rate quotas, from the image's client quotas."""

    def __init__(self, quotas: QuotaConfigs | None = None, *,
                 max_throttle_time_ms: int | None = MAX_THROTTLE_TIME_MS) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, quotas,
                                          max_throttle_time_ms=max_throttle_time_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, quotas,
                                        max_throttle_time_ms=max_throttle_time_ms)

    def update(self, quotas: QuotaConfigs) -> None:
        self.produce.update(quotas)
        self.fetch.update(quotas)

    def expire_idle(self, now_ms: int) -> None:
        self.produce.expire_idle(now_ms)
        self.fetch.expire_idle(now_ms)
