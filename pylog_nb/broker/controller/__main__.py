"""``python -m pylog_nb.broker.controller``: run the controller process (LocalCluster starts it)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

# kio registers Hypothesis strategies whenever it can import Hypothesis (half a second of start-up
# in a test environment); the controller process never needs them.
# None in sys.modules blocks the import; typeshed types its values as modules only.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from ..process.dirlock import DataDirInUseError, lock_data_dir  # noqa: E402
from ..security.secrets import SecretsError, load  # noqa: E402
from .controller import BROKER_SESSION_TIMEOUT_MS  # noqa: E402
from .quorum import METADATA_SNAPSHOT_RECORDS_MAX  # noqa: E402
from .server import parse_voters, run_controller  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pylog_nb.broker.controller")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-fd", type=int, help="write the bound port here once listening")
    parser.add_argument("--parent-fd", type=int, help="shut down when this pipe closes")
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        default=BROKER_SESSION_TIMEOUT_MS,
        help="fence a broker that has not heartbeat for this long",
    )
    parser.add_argument(
        "--snapshot-records",
        type=int,
        default=METADATA_SNAPSHOT_RECORDS_MAX,
        help="snapshot the metadata image once the log since the last snapshot holds this "
        "many records (Kafka: metadata.log.max.record.bytes.between.snapshots)",
    )
    parser.add_argument("--node-id", type=int, default=1, help="this controller's voter id")
    parser.add_argument(
        "--voters",
        help="every voter as ID@HOST:RAFT_PORT, comma-separated (default: a quorum of one)",
    )
    parser.add_argument(
        "--secrets",
        type=Path,
        help="the cluster's secrets file: connections must present its internal token, and "
        "its SCRAM users are written to the metadata log when missing (default: no security)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s controller %(levelname)s %(message)s"
    )
    try:
        voters = None if args.voters is None else parse_voters(args.voters)
    except ValueError as error:
        parser_error = f"pylog controller: --voters: {error}"
        print(parser_error, file=sys.stderr)
        sys.exit(2)
    if args.snapshot_records < 1:
        print("pylog controller: --snapshot-records must be positive", file=sys.stderr)
        sys.exit(2)
    if voters is not None and args.node_id not in voters:
        print(f"pylog controller: --node-id {args.node_id} is not among --voters", file=sys.stderr)
        sys.exit(2)
    try:
        secrets = None if args.secrets is None else load(args.secrets)
    except SecretsError as error:
        print(f"pylog controller: --secrets: {error}", file=sys.stderr)
        sys.exit(2)
    try:
        lock_data_dir(args.data_dir)
    except DataDirInUseError as error:
        print(f"pylog controller: {error}", file=sys.stderr)
        sys.exit(2)
    exit_code = asyncio.run(
        run_controller(
            args.data_dir,
            args.host,
            args.port,
            args.ready_fd,
            args.parent_fd,
            node_id=args.node_id,
            voters=voters,
            session_timeout_ms=args.session_timeout_ms,
            snapshot_records_max=args.snapshot_records,
            secrets=secrets,
        )
    )
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
