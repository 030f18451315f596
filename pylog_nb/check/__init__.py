"""A Jepsen-style check of a real cluster: acks=all writes under faults, read back, judged.

    from pylog_nb.check import run_check
    result = run_check(seconds=60, seed=7, faults=("kill", "pause", "long-pause", "isolate"))
    result.summary      # one line: sent, acked, lost, duplicate, ... ; faults
    result.anomalies    # a DataFrame: kind, partition, offset, value, detail
    result.history.sends_frame(), result.history.nemesis_frame()

or ``python -m pylog_nb.check --seconds 60 --seed 7 --faults kill,pause`` (``scripts/check.sh``).
The modules, in the order a check uses them: ``nemesis`` (the seeded fault schedule),
``workload`` (idempotent acks=all producers), ``observe`` (settling, who believes it leads),
``final_read``, ``analysis`` (the anomalies, from the ``history`` alone) and ``run``.

The transactional workload (``--workload txn``) has its own: ``txn_workload`` (transactional
producers across two topics, committing and aborting, and a read_committed and a
read_uncommitted reader), ``txn_history``, ``txn_analysis`` (aborted-read, lost-write,
nonatomic-read, duplicate) and ``txn_run``:

    from pylog_nb.check import run_txn_check
    result = run_txn_check(seconds=60, seed=7, faults=("kill", "isolate"))

Share groups (``--workload share``: ``share_workload``, ``share_run``) and a Spark query
(``--workload spark``: ``spark_workload``, ``spark_run``: an ``exactlyOnce=true`` streaming
query from topic to topic whose driver and Python workers are killed at random, restarted from
its checkpoint; its output, read_committed, must hold each input's f(value) exactly once)
have theirs too.
"""

from .analysis import ANOMALY_KINDS, analyze
from .history import History, LeaderSample, NemesisOp, PartitionRead, Read, Send
from .nemesis import FAULTS, PlannedFault, plan
from .run import CheckResult, check_cluster, run_check
from .txn_analysis import TXN_ANOMALY_KINDS, analyze_txns
from .txn_history import ReaderEnd, Txn, TxnHistory, TxnRead, TxnRecord
from .txn_run import TxnCheckResult, check_txn_cluster, run_txn_check

__all__ = ["ANOMALY_KINDS", "FAULTS", "TXN_ANOMALY_KINDS", "CheckResult", "History",
           "LeaderSample", "NemesisOp", "PartitionRead", "PlannedFault", "Read", "ReaderEnd",
           "Send", "Txn", "TxnCheckResult", "TxnHistory", "TxnRead", "TxnRecord", "analyze",
           "analyze_txns", "check_cluster", "check_txn_cluster", "plan", "run_check",
           "run_txn_check"]
