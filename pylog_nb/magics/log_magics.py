"""The ``%log_*`` magics. Argument parsing and display only; the work is in ``pylog_nb.client``.

The magics act on one *target* per kernel: a ``LocalCluster`` started by ``%log_cluster start``,
or any Kafka-compatible cluster named by ``%log_cluster connect HOST:PORT``. The introspection
magics (``%log_cluster status``, faults) need a LocalCluster; produce, consume and the group
views work against either.
"""

from __future__ import annotations

import functools
import shlex

from confluent_kafka import KafkaException
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..client import events_frame, groups_frame, lag_frame, partitions_frame
from ..client.io import (
    LogClientError,
    consume,
    create_topic,
    delete_topic,
    produce,
    topics_frame,
)
from ..cluster import ClusterError, LocalCluster

DEFAULT_BROKERS = 3
FAULTS = ("kill", "restart", "pause", "resume", "isolate", "heal")
CLUSTER_ACTIONS = ("start", "stop", "status", "events", "connect", *FAULTS)


def _one_line_errors(magic):
    """Turn every expected failure into one UsageError line (IPython prints no traceback)."""
    @functools.wraps(magic)
    def wrapper(*args, **kwargs):
        try:
            return magic(*args, **kwargs)
        except (LogClientError, ClusterError, ValueError, KafkaException) as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise UsageError(message) from None
    return wrapper


@magics_class
class LogMagics(Magics):
    def __init__(self, shell) -> None:
        super().__init__(shell)
        self.cluster: LocalCluster | None = None
        self.bootstrap: str | None = None  # set by connect: a cluster we did not start

    # -- %log_cluster ---------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("action", choices=CLUSTER_ACTIONS, help="what to do")
    @argument("target", nargs="?", help="broker id (faults) or HOST:PORT (connect)")
    @argument("-b", "--brokers", type=int, default=DEFAULT_BROKERS, help="brokers to start")
    @argument("-d", "--data-dir", help="keep the data here (default: a temporary directory)")
    @argument("--broker-args", default="", help='extra broker options, e.g. "--num-partitions 3"')
    @_one_line_errors
    def log_cluster(self, line: str):
        """Start, stop, inspect or break the notebook's cluster, or connect to another one."""
        args = parse_argstring(self.log_cluster, line)
        if args.action == "start":
            return self._start(args)
        if args.action == "connect":
            return self._connect(args.target)
        if args.action == "stop":
            return self._stop()
        cluster = self._local()
        if args.action == "status":
            return partitions_frame(cluster)
        if args.action == "events":
            return events_frame(cluster)
        broker_id = self._broker_id(cluster, args.target)
        getattr(cluster, args.action)(broker_id)
        print(f"broker {broker_id}: {args.action} done")
        return None

    def _start(self, args) -> LocalCluster:
        if self.cluster is not None or self.bootstrap is not None:
            raise UsageError("a cluster is already in use: %log_cluster stop first")
        # IPython's argument splitter keeps the quotes around "--x 1": split what they held too.
        broker_args = tuple(t for part in shlex.split(args.broker_args) for t in shlex.split(part))
        cluster = LocalCluster(brokers=args.brokers, data_dir=args.data_dir,
                               broker_args=broker_args)
        self.cluster = cluster.start()
        return cluster

    def _connect(self, bootstrap: str | None) -> None:
        if not bootstrap:
            raise UsageError("connect needs HOST:PORT[,HOST:PORT...]")
        if self.cluster is not None:
            raise UsageError("a local cluster is running: %log_cluster stop first")
        self.bootstrap = bootstrap
        print(f"using bootstrap.servers={bootstrap}")

    def _stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            print("cluster stopped")
        self.cluster = self.bootstrap = None

    def _local(self) -> LocalCluster:
        if self.cluster is None:
            raise UsageError("this needs a local cluster: %log_cluster start")
        return self.cluster

    @staticmethod
    def _broker_id(cluster: LocalCluster, target: str | None) -> int:
        if target is None or not target.isdigit() or int(target) not in cluster.brokers:
            raise UsageError(f"name a broker: one of {sorted(cluster.brokers)}")
        return int(target)

    def _target(self) -> str:
        if self.bootstrap is not None:
            return self.bootstrap
        if self.cluster is not None:
            return self.cluster.bootstrap_servers
        raise UsageError("no cluster: %log_cluster start, or %log_cluster connect HOST:PORT")

    def _source(self) -> LocalCluster | str:
        """The LocalCluster (whose LEOs the group views can show), else the bootstrap string."""
        return self.cluster if self.cluster is not None else self._target()

    @line_magic
    @magic_arguments()
    @argument("--refresh", type=float, default=1.0, help="seconds between snapshots")
    @_one_line_errors
    def log_watch(self, line: str):
        """A live view of the local cluster: brokers, partitions, groups, events, fault buttons."""
        from ..widgets import ClusterView  # ipywidgets only when a view is asked for

        args = parse_argstring(self.log_watch, line)
        return ClusterView(self._local(), refresh_s=args.refresh)

    # -- %log_topic ----------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("action", choices=("create", "delete", "list"))
    @argument("name", nargs="?")
    @argument("-p", "--partitions", type=int, default=1)
    @argument("-r", "--replication-factor", type=int, default=1)
    @argument("-c", "--config", action="append", default=[], help="KEY=VALUE, repeatable")
    @_one_line_errors
    def log_topic(self, line: str):
        """Create, delete or list topics: %log_topic create t -p 3 -r 3 -c min.insync.replicas=2"""
        args = parse_argstring(self.log_topic, line)
        if args.action == "list":
            return topics_frame(self._target())
        if not args.name:
            raise UsageError(f"{args.action} needs a topic name")
        if args.action == "delete":
            delete_topic(self._target(), args.name)
        else:
            create_topic(self._target(), args.name, partitions=args.partitions,
                         replication_factor=args.replication_factor,
                         configs=_configs(args.config))
        print(f"topic {args.name}: {args.action}d")
        return None

    # -- %log_produce / %%log_produce -------------------------------------------------------------

    @line_cell_magic
    @magic_arguments()
    @argument("topic")
    @argument("value", nargs="*", help="the record's value (line magic)")
    @argument("-k", "--key", help="the record's key (line magic)")
    @argument("-s", "--separator", help="cell magic: split each line into key<SEP>value")
    @argument("-p", "--partition", type=int, help="write to this partition")
    @argument("--acks", default="all", help="0, 1 or all (default)")
    @argument("-z", "--compression", default="none", help="none, gzip, snappy, lz4, zstd")
    @_one_line_errors
    def log_produce(self, line: str, cell: str | None = None):
        """Write one record (line magic) or one record per line of the cell; returns offsets."""
        args = parse_argstring(self.log_produce, line)
        if cell is None:
            records = [(args.key, " ".join(args.value))]
        else:
            records = [_split(text, args.separator) for text in cell.splitlines() if text]
        return produce(self._target(), args.topic, records, acks=args.acks,
                       partition=args.partition, compression=args.compression)

    # -- %log_consume ---------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("topic")
    @argument("-n", "--count", type=int, help="stop after this many records")
    @argument("--from", dest="start", default="earliest",
              help="earliest (default), latest, or an offset")
    @argument("-p", "--partition", type=int, action="append", help="only this partition")
    @argument("-g", "--group", help="read as a member of this group, and commit")
    @argument("--timeout", type=float, default=10.0, help="seconds to wait for a record")
    @_one_line_errors
    def log_consume(self, line: str):
        """Read records into a DataFrame: all up to the high watermark, or --count of them."""
        args = parse_argstring(self.log_consume, line)
        start = int(args.start) if args.start.isdigit() else args.start
        return consume(self._target(), args.topic, count=args.count, start=start,
                       partitions=args.partition, group=args.group, timeout_s=args.timeout)

    # -- groups ---------------------------------------------------------------------------------

    @line_magic
    @_one_line_errors
    def log_lag(self, line: str):
        """%log_lag [GROUP]: committed offset, HW, LEO and lag per group and partition."""
        return lag_frame(self._source(), line.strip() or None)

    @line_magic
    @_one_line_errors
    def log_groups(self, line: str):
        """%log_groups: every consumer group, its state, assignor, members and coordinator."""
        return groups_frame(self._source())


    # -- %log_spark -----------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("topic")
    @argument("--from", dest="starting", default="earliest",
              help="earliest (default), or PARTITION:OFFSET,... (others from the earliest)")
    @argument("--to", dest="ending", default="latest",
              help="latest (default), or PARTITION:OFFSET,... (others to the latest)")
    @argument("--headers", action="store_true", help="add the headers column")
    @argument("--bytes", action="store_true", help="keep key and value binary, not text")
    @argument("-o", "--option", action="append", default=[],
              help="any option of the pylog source, KEY=VALUE, repeatable")
    @_one_line_errors
    def log_spark(self, line: str):
        """A topic as a Spark DataFrame (``df = %log_spark orders``), on a local SparkSession."""
        args = parse_argstring(self.log_spark, line)
        from ..spark import to_spark
        try:
            return to_spark(self._target(), args.topic, starting=_partition_offsets(args.starting),
                            ending=_partition_offsets(args.ending), text=not args.bytes,
                            include_headers=args.headers, **_configs(args.option))
        except Exception as error:  # a JVM-side failure: keep the line that names the cause
            if type(error).__module__.startswith("pyspark"):
                raise UsageError(_spark_cause(str(error))) from None
            raise


def _spark_cause(text: str) -> str:
    """The readable line of a Spark error: our source's own message when there is one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [line for line in lines if "SparkSourceError:" in line]
    chosen = ours[-1].split("SparkSourceError:", 1)[1] if ours else (lines or ["Spark failed"])[0]
    return chosen.strip()


def _partition_offsets(text: str) -> str | dict[int, int]:
    """earliest / latest as they are; "0:42,1:-2" as {0: 42, 1: -2}."""
    if text in ("earliest", "latest"):
        return text
    offsets = {}
    for pair in text.split(","):
        partition, found, offset = pair.partition(":")
        try:
            offsets[int(partition)] = int(offset)
        except ValueError:
            found = ""
        if not found:
            raise UsageError(f"{pair!r} is not PARTITION:OFFSET (e.g. 0:42,1:-2)")
    return offsets


def _configs(pairs: list[str]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        key, found, value = pair.partition("=")
        if not found or not key:
            raise UsageError(f"config {pair!r} is not KEY=VALUE")
        configs[key] = value
    return configs


def _split(text: str, separator: str | None) -> tuple[str | None, str]:
    if separator is None:
        return None, text
    key, found, value = text.partition(separator)
    if not found:
        raise UsageError(f"line {text[:40]!r} has no separator {separator!r}")
    return key, value
