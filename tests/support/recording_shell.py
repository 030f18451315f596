"""A broker core's shell for tests that drive the core by hand: it carries nothing and remembers
what the core handed it (``sent``); anything else a core might ask of it fails the test."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecordingShell:
    """A shell that carries nothing: it remembers what the core handed it."""

    sent: list = field(default_factory=list)

    def send(self, outbound) -> None:
        self.sent.append(outbound)

    def role_changed(self, action, partition) -> None:
        pass

    def send_markers(self, action) -> None:
        raise AssertionError("no transactions here")

    def refill_producer_ids(self) -> None:
        raise AssertionError("no transactions here")

    def request_producer_id(self):
        raise AssertionError("no producer ids here")

    def verify_transaction(self, transactional_id, producer_id, producer_epoch, partitions):
        raise AssertionError("no transactions here")

    def call_later(self, delay_ms, callback):
        raise AssertionError("no fetches wait here")
