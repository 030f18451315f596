"""The one error a ``__consumer_offsets`` record that does not parse raises (a leaf module:
``records.py`` and ``consumer_records.py`` both raise it)."""

from __future__ import annotations

__all__ = ["RecordDecodeError"]


class RecordDecodeError(ValueError):
    """A ``__consumer_offsets`` record that does not parse."""
