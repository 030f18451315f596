"""Sans-IO transaction coordinator (KIP-98, KIP-360, KIP-588) and ``__transaction_state``.

The shell routes a transactional id to ``partition_for(id, partitions)``, feeds the broker's
``TransactionCoordinator`` InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn
requests, leadership changes (``begin_load`` / ``load`` / ``unload``), append and marker
outcomes (``on_appended``, ``on_markers_written``) and clock ticks, and carries out the
``actions`` it returns. See ``coordinator.py`` for the theory of operation and the requests;
``state_manager.py`` holds the ids, their appends and the loading of partitions (Kafka's
TransactionStateManager); ``transitions.py`` the image each request moves an id to;
``markers.py`` the completion of decided transactions; ``replies.py`` and ``describe.py`` the
answers; ``metadata.py`` the states and their table; ``records.py`` the record format.
"""

from .actions import (
    Action,
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    AppendRecords,
    EndTxnAnswer,
    InitProducerIdAnswer,
    TxnStateChanged,
    WriteTxnMarkers,
)
from .coordinator import (
    ListedTransaction,
    ListTransactionsResult,
    TransactionCoordinator,
    TransactionDescription,
)
from .metadata import TransactionMetadata, TransactionState
from .records import TransactionLogValue, partition_for

__all__ = [
    "Action",
    "AddOffsetsAnswer",
    "AddPartitionsAnswer",
    "AppendRecords",
    "EndTxnAnswer",
    "InitProducerIdAnswer",
    "ListTransactionsResult",
    "ListedTransaction",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionLogValue",
    "TransactionMetadata",
    "TransactionState",
    "TxnStateChanged",
    "WriteTxnMarkers",
    "partition_for",
]
