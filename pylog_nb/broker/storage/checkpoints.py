"""Small checkpoint files written atomically: write a temp file, fsync, rename, fsync the dir.

A reader sees either the old or the new content, never a torn one, whatever moment a crash hits.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import KafkaStorageError

__all__ = ["TMP_SUFFIX", "OffsetCheckpointFile", "fsync_dir", "write_atomically"]

TMP_SUFFIX = ".tmp"
CHECKPOINT_VERSION = 0
# Checkpoints are a few lines; anything larger is not ours.
CHECKPOINT_MAX_BYTES = 1024 * 1024


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_small_file(path: Path) -> bytes | None:
    """The whole content of a checkpoint, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read(CHECKPOINT_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > CHECKPOINT_MAX_BYTES:
        raise KafkaStorageError(f"checkpoint {path} is larger than {CHECKPOINT_MAX_BYTES} bytes")
    return data


class OffsetCheckpointFile:
    """One offset in a text file: line 1 version ``0``, line 2 the offset."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written: int | None = None

    def read(self) -> int | None:
        """The stored offset, or None when the file is missing; raise if it is malformed."""
        data = read_small_file(self.path)
        if data is None:
            return None
        lines = data.decode("ascii", "replace").split()
        if len(lines) != 2 or lines[0] != str(CHECKPOINT_VERSION):
            raise KafkaStorageError(f"malformed checkpoint {self.path}: {data[:64]!r}")
        try:
            offset = int(lines[1])
        except ValueError:
            raise KafkaStorageError(f"malformed offset in checkpoint {self.path}") from None
        self._written = offset
        return offset

    def write(self, offset: int) -> None:
        """Persist ``offset`` atomically; a no-op when it is already on disk."""
        assert offset >= 0, offset
        if offset == self._written:
            return
        write_atomically(self.path, f"{CHECKPOINT_VERSION}\n{offset}\n".encode("ascii"))
        self._written = offset
