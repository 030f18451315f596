"""``python -m pylog_nb.check``: run one check, print its summary and anomalies, exit 1 on any.

Theory of operation: arguments become one ``run_check`` call (``run_txn_check`` with
``--workload txn``) on a fresh 3-broker cluster on 127.0.0.1; stdout gets the one-line
summary, the counts and the anomalies (the first ``--rows``); stderr gets the plan and the
notes. Exit status 0 means no anomaly of any kind, 1 means at least one, 2 a usage error.
Long runs are the point: ``--seconds 600``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import pandas as pd

from .group_workload import PROTOCOLS
from .history import FaultLog
from .nemesis import FAULTS
from .run import SECONDS_DEFAULT, CheckResult, run_check
from .share_run import ShareCheckResult, run_share_check
from .spark_run import SPARK_PRODUCERS, SparkCheckResult, run_spark_check
from .txn_run import TXN_PRODUCERS, TxnCheckResult, run_txn_check
from .workload import RATE_PER_S

PRODUCERS_DEFAULT = 2
ROWS_DEFAULT = 10  # of each kind
SECONDS_MAX = 24 * 3600.0  # a day: past that, split the run into seeds


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown or not 0 < args.seconds <= SECONDS_MAX:
        print(f"pylog-check: unknown faults {unknown}; known: {', '.join(FAULTS)}"
              if unknown else f"pylog-check: --seconds must be in (0, {SECONDS_MAX:g}]",
              file=sys.stderr)
        return 2
    print(f"pylog-check: seed {args.seed}, {args.seconds:g} s, faults {','.join(faults)}",
          file=sys.stderr)
    # SIGTERM unwinds like Ctrl+C: paused brokers are resumed and every process stopped.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    if args.workload == "share":
        share_result = run_share_check(seconds=args.seconds, seed=args.seed, faults=faults,
                                       data_dir=args.data_dir,
                                       producers=args.producers or PRODUCERS_DEFAULT)
        _report_faults(share_result.history)
        _report_anomalies(share_result, args.rows)
        return 0 if share_result.ok else 1
    if args.workload == "spark":
        spark_result = run_spark_check(seconds=args.seconds, seed=args.seed, faults=faults,
                                       data_dir=args.data_dir,
                                       producers=args.producers or SPARK_PRODUCERS)
        _report_spark(spark_result, args.rows)
        return 0 if spark_result.ok else 1
    if args.workload == "txn":
        txn_result = run_txn_check(seconds=args.seconds, seed=args.seed, faults=faults,
                                   data_dir=args.data_dir,
                                   producers=args.producers or TXN_PRODUCERS)
        _report_txn(txn_result, args.rows)
        if args.save is not None:
            _save(txn_result, args.save)
        return 0 if txn_result.ok else 1
    result = run_check(seconds=args.seconds, seed=args.seed, faults=faults,
                       data_dir=args.data_dir, producers=args.producers or PRODUCERS_DEFAULT,
                       rate_per_s=args.rate, group_protocol=args.group_protocol)
    _report(result, args.rows)
    if args.save is not None:
        _save(result, args.save)
    return 0 if result.ok else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pylog_nb.check",
        description="Jepsen-style check: idempotent acks=all producers under a seeded nemesis, "
                    "then a full read and a history analysis.")
    parser.add_argument("--seconds", type=float, default=SECONDS_DEFAULT,
                        help="how long the workload and the nemesis run")
    parser.add_argument("--seed", type=int, default=0, help="names the fault schedule")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"comma-separated, from {','.join(FAULTS)}")
    parser.add_argument("--workload", choices=("records", "txn", "share", "spark"),
                        default="records",
                        help="records: idempotent producers; txn: transactional producers "
                             "across two topics, read_committed and read_uncommitted readers; "
                             "spark: an exactlyOnce streaming query whose driver and Python "
                             "workers are killed at random")
    parser.add_argument("--producers", type=int, default=None,
                        help=f"default {PRODUCERS_DEFAULT} (records), {TXN_PRODUCERS} (txn)")
    parser.add_argument("--rate", type=int, default=RATE_PER_S,
                        help="records per second per producer")
    parser.add_argument("--data-dir", default=None,
                        help="keep the brokers' data here (default: a temporary directory)")
    parser.add_argument("--rows", type=int, default=ROWS_DEFAULT,
                        help="anomalies of each kind to print at most")
    parser.add_argument("--group-protocol", choices=PROTOCOLS, default=None,
                        help="records workload: a consumer group of this protocol also reads "
                             "under the faults and is judged at-least-once (KIP-848: consumer; "
                             "mixed: members of both, the group converted as they come and go)")
    parser.add_argument("--save", type=Path, default=None, metavar="DIR",
                        help="write the history and the anomalies there as CSV files")
    return parser


def _report(result: CheckResult, rows: int) -> None:
    _report_faults(result.history)
    errors = result.history.sends_frame()["error"].value_counts()
    for error, count in errors.items():
        print(f"failed sends: {count:,} with {error}", file=sys.stderr)
    _report_anomalies(result, rows)


def _report_txn(result: TxnCheckResult, rows: int) -> None:
    _report_faults(result.history)
    errors = result.history.txns_frame()["error"].value_counts()
    for error, count in errors.items():
        print(f"transactions ended by: {count:,} with {error}", file=sys.stderr)
    _report_anomalies(result, rows)


def _report_spark(result: SparkCheckResult, rows: int) -> None:
    _report_faults(result.history)
    for at_s, kind, detail in result.spark.events:
        print(f"spark: {at_s:.1f} s {kind} {detail}", file=sys.stderr)
    _report_anomalies(result, rows)


def _report_faults(history: FaultLog) -> None:
    for op in history.nemesis:
        where = "controller" if op.broker is None else f"broker {op.broker}"
        print(f"fault: {op.fault} {where} {op.start_s:.1f}-{op.end_s:.1f} s"
              + (f" ({op.error})" if op.error else ""), file=sys.stderr)
    for note in history.notes:
        print(f"note: {note}", file=sys.stderr)


def _report_anomalies(result: CheckResult | TxnCheckResult | ShareCheckResult
                      | SparkCheckResult, rows: int) -> None:
    print(result.summary)
    counts = pd.Series(result.counts, name="count")
    print(counts.to_string())
    shown = result.anomalies.groupby("kind", sort=False).head(rows)
    if len(shown):
        with pd.option_context("display.max_colwidth", 120, "display.width", 200):
            print(shown.to_string(index=False))
    if len(result.anomalies) > len(shown):
        print(f"... and {len(result.anomalies) - len(shown):,} more anomalies "
              f"(at most {rows} of each kind shown)")


def _save(result: CheckResult | TxnCheckResult, directory: Path) -> None:
    """sends.csv (or txns.csv), nemesis.csv, reads.csv, anomalies.csv and summary.txt in
    ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    history = result.history
    if isinstance(result, TxnCheckResult):
        result.history.txns_frame().to_csv(directory / "txns.csv", index=False)
    else:
        result.history.sends_frame().to_csv(directory / "sends.csv", index=False)
    history.nemesis_frame().to_csv(directory / "nemesis.csv", index=False)
    history.reads_frame().to_csv(directory / "reads.csv", index=False)
    result.anomalies.to_csv(directory / "anomalies.csv", index=False)
    (directory / "summary.txt").write_text(result.summary + "\n")
    print(f"pylog-check: history saved in {directory}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
