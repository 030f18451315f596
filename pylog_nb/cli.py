"""The ``pylog`` command: ``pylog cluster start --brokers N --data-dir D [--security none]
[--tls]``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from .cluster import ClusterError, LocalCluster
from .cluster.local import SASL, SECURITY_MODES


def _cluster_start(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster = LocalCluster(brokers=args.brokers, data_dir=args.data_dir,
                               security=args.security, tls=args.tls).start()
    except ClusterError as error:
        print(f"pylog: {error}", file=sys.stderr)
        return 1
    print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
    if cluster.secrets is not None:
        layers = "SASL over TLS" if cluster.ca_file is not None else "SASL"
        print(f"client settings ({layers}, this account only): {cluster.client_properties}\n"
              f"  e.g. {cluster.kcat_command('-L')}", flush=True)
    print(f"data dir: {cluster.data_dir}  (Ctrl+C stops the cluster)", flush=True)
    try:
        stop.wait()
    finally:
        cluster.stop()
    print("cluster stopped", flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pylog", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    cluster = commands.add_parser("cluster", help="run a local cluster")
    actions = cluster.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start brokers and run until Ctrl+C")
    start.add_argument("--brokers", type=int, default=1)
    start.add_argument("--data-dir", type=Path, default=None,
                       help="keep logs here (default: a temporary directory removed on exit)")
    start.add_argument("--security", choices=SECURITY_MODES, default=SASL,
                       help="sasl (default): authenticated listeners, owner's credentials in "
                            "the data directory; none: open PLAINTEXT listeners")
    start.add_argument("--tls", action="store_true",
                       help="with --security sasl: TLS listeners (SASL_SSL) and a CA of the "
                            "cluster's own (<data dir>/tls/ca.pem), named in the client settings")
    start.set_defaults(run=_cluster_start)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
