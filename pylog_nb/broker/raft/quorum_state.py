"""What a voter must remember across a crash: its epoch, whom it voted for, whom it follows.

Raft's safety rests on two promises a voter keeps even when it restarts: it never goes back to
an older epoch, and it never votes twice in one epoch. So the election state is written to the
file ``quorum-state`` (JSON, like Kafka's) before the voter answers a vote or acts on a new
epoch: written to a temporary file, fsynced, renamed over the old one, and the directory
fsynced, so a crash leaves either the old state or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_FILE_NAME = "quorum-state"
STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class ElectionState:
    """A voter's durable election state: ``voted_for`` and ``leader_id`` are None when unknown;
    ``voted_for`` is never changed within an epoch once set."""

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None

    def __post_init__(self) -> None:
        assert self.epoch >= 0, self.epoch


class QuorumStateStore:
    """Reads and durably replaces one voter's ``ElectionState``."""

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / STATE_FILE_NAME
        self._fsync = fsync

    def read(self) -> ElectionState:
        """The state last written, or the initial state when there is none."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return ElectionState()
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"{self.path}: unknown quorum-state version {data.get('version')}")
        return ElectionState(data["epoch"], data["voted_for"], data["leader_id"])

    def write(self, state: ElectionState) -> None:
        """Replace the state atomically and durably."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "w") as out:
            json.dump({"version": STATE_VERSION, **asdict(state)}, out)
            out.flush()
            if self._fsync:
                os.fsync(out.fileno())
        os.replace(temporary, self.path)
        if self._fsync:
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
