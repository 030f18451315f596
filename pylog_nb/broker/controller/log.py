"""What remains of the controller's old metadata log, now the Raft log (``..raft.log``).

Only the bound on one metadata fetch is left, because ``server.py`` imports it from here; it
belongs in ``server.py`` (``fetch_metadata``), and this module goes once it has moved there.
"""

__all__ = ["READ_RECORDS_MAX"]

# One metadata fetch answers at most this many records, so a new broker catches up in slices.
READ_RECORDS_MAX = 10_000
