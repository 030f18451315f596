"""Kafka error codes the transaction coordinator answers with or receives from its shell.

Plain ints from the one table (``pylog_nb.broker.errors``, a leaf module), under the names the
core uses, so the actions carry the same values whatever reads them; and the outcomes of
WriteTxnMarkers per partition, as Kafka's TransactionMarkerRequestCompletionHandler sorts them.
"""

from __future__ import annotations

from ..errors import Errors
from ..group.errors import group_store_error

__all__ = [
    "CONCURRENT_TRANSACTIONS",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_PRODUCER_ID_MAPPING",
    "INVALID_REQUEST",
    "INVALID_TRANSACTION_TIMEOUT",
    "INVALID_TXN_STATE",
    "MARKER_FENCED",
    "MARKER_WRITTEN",
    "NONE",
    "NOT_COORDINATOR",
    "PRODUCER_FENCED",
    "TRANSACTIONAL_ID_NOT_FOUND",
    "group_store_error",
]

NONE = int(Errors.NONE)
CONCURRENT_TRANSACTIONS = int(Errors.CONCURRENT_TRANSACTIONS)
COORDINATOR_LOAD_IN_PROGRESS = int(Errors.COORDINATOR_LOAD_IN_PROGRESS)
INVALID_PRODUCER_EPOCH = int(Errors.INVALID_PRODUCER_EPOCH)
INVALID_PRODUCER_ID_MAPPING = int(Errors.INVALID_PRODUCER_ID_MAPPING)
INVALID_REQUEST = int(Errors.INVALID_REQUEST)
INVALID_TRANSACTION_TIMEOUT = int(Errors.INVALID_TRANSACTION_TIMEOUT)
INVALID_TXN_STATE = int(Errors.INVALID_TXN_STATE)
NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)
PRODUCER_FENCED = int(Errors.PRODUCER_FENCED)
TRANSACTIONAL_ID_NOT_FOUND = int(Errors.TRANSACTIONAL_ID_NOT_FOUND)

# WriteTxnMarkers outcomes per partition: written (old message formats have no markers, so
# nothing to write), or refused because a newer coordinator owns the id.
MARKER_WRITTEN = frozenset({NONE, int(Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT)})
MARKER_FENCED = frozenset({INVALID_PRODUCER_EPOCH, int(Errors.TRANSACTION_COORDINATOR_FENCED)})
