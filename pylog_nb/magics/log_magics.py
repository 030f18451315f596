"""The ``%log_*`` magics. Argument parsing and display only; the work is in ``pylog_nb.client``.

The magics act on one *target* per kernel: a ``LocalCluster`` started by ``%log_cluster start``,
or any Kafka-compatible cluster named by ``%log_cluster connect HOST:PORT``. The introspection
magics (``%log_cluster status``, faults) need a LocalCluster; produce, consume and the group
views work against either. Connecting checks the address at once (``pylog_nb.client.probe``),
so a wrong one is one line within seconds, not a transport error from the next magic.

Faults act on a broker (``kill 2``) or on the controller quorum (``kill controller``: the active
controller unless an id follows). ``pylog_nb.client.controller_faults`` chooses the controller,
refuses a fault that cannot apply and waits, bounded, for the quorum to settle; ``status``
shows the quorum (``quorum_frame``) above the partitions it returns.

A wait longer than about a second says what it waits for, in a status line that is replaced
when it ends (``pylog_nb.client.status``); the first start of Spark says so before it starts.
"""

from __future__ import annotations

import contextlib
import functools
import shlex
import sys
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..client import (
    alter_group_configs,
    credentials_frame,
    events_frame,
    group_configs_frame,
    groups_frame,
    lag_frame,
    members_frame,
    partitions_frame,
    quorum_frame,
)
from ..client.browsing import COUNT_DEFAULT as BROWSE_COUNT_DEFAULT
from ..client.browsing import COUNT_MAX as BROWSE_COUNT_MAX
from ..client.browsing import browse
from ..client.controller_faults import controller_fault
from ..client.io import (
    CONSUME_TIMEOUT_S,
    GROUP_PROTOCOLS,
    ISOLATION_LEVELS,
    REMOTE_ASSIGNORS,
    LogClientError,
    consume,
    create_topic,
    delete_topic,
    produce,
    topics_frame,
    waits_for_new_records,
)
from ..client.probe import CONNECT_TIMEOUT_S, check_cluster
from ..client.security import (
    AclSpec,
    acls_frame,
    add_acls,
    add_user,
    remove_acls,
    remove_user,
    user_config,
    users_frame,
)
from ..client.share_consume import read_share
from ..client.shares import share_partitions_frame
from ..client.status import waiting
from ..client.txn import Transaction
from ..cluster import ClusterError, LocalCluster
from ..cluster.local import SASL, SECURITY_MODES

if TYPE_CHECKING:
    from ..widgets import ClusterView

DEFAULT_BROKERS = 3
DEFAULT_TRANSACTIONAL_ID = "pylog-nb"
FAULTS = ("kill", "restart", "pause", "resume", "isolate", "heal")
TARGET_ACTIONS = ("start", "stop", "connect", "disconnect")  # choose what the magics act on
CLUSTER_ACTIONS = (*TARGET_ACTIONS, "status", "events", "credentials", *FAULTS)
CONTROLLER = "controller"  # the fault's target: the controller quorum, not a broker
STATUS_VIEWS = ("quorum", "partitions")
EVERY_RECORD = "every"  # --release / --reject alone: every record the read is handed


def _one_line_errors(magic):
    """Turn every expected failure into one UsageError line (IPython prints no traceback)."""
    @functools.wraps(magic)
    def wrapper(*args, **kwargs):
        try:
            return magic(*args, **kwargs)
        except KafkaException as error:  # its str() is KafkaError{code=...}: keep the words
            raise UsageError(_first_line(_kafka_words(error))) from None
        except (LogClientError, ClusterError, ValueError) as error:
            raise UsageError(_first_line(str(error)) or type(error).__name__) from None
    return wrapper


def _acl_resource(args, required: bool = True) -> tuple[str | None, str | None]:
    named = [(kind, getattr(args, kind)) for kind in ("topic", "group", "transactional_id")
             if getattr(args, kind)]
    if args.cluster:
        named.append(("cluster", "kafka-cluster"))
    if len(named) > 1 or (required and not named):
        raise UsageError("name one resource: --topic, --group, --transactional-id or --cluster")
    return named[0] if named else (None, None)


def _acl_specs(args) -> list[AclSpec]:
    if not args.principal or not args.operations:
        raise UsageError(f"%log_acl {args.action} PRINCIPAL OPERATIONS (resource)")
    kind, name = _acl_resource(args)
    assert kind is not None and name is not None
    return [AclSpec(args.principal, operation, kind, name,
                    "prefixed" if args.prefixed else "literal",
                    "deny" if args.deny else "allow", args.host)
            for operation in args.operations.split(",") if operation.strip()]


def _kafka_words(error: KafkaException) -> str:
    kafka_error = error.args[0] if error.args else None
    return kafka_error.str() if isinstance(kafka_error, KafkaError) else str(error)


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


@magics_class
class LogMagics(Magics):
    def __init__(self, shell) -> None:
        super().__init__(shell)
        self.cluster: LocalCluster | None = None
        self.bootstrap: str | None = None  # set by connect: a cluster we did not start
        self._views: list[ClusterView] = []  # opened by %log_watch on self.cluster

    # -- %log_cluster ---------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("action", choices=CLUSTER_ACTIONS, help="what to do")
    @argument("target", nargs="?", help="faults: a broker id, or controller; connect: "
                                        "HOST:PORT,...; status: quorum or partitions alone")
    @argument("controller_id", nargs="?", metavar="ID",
              help="after controller: which one (default: the active one for kill, pause and "
                   "isolate; every paused, down or isolated one for resume, restart and heal)")
    @argument("-b", "--brokers", type=int, default=DEFAULT_BROKERS, help="brokers to start")
    @argument("--controllers", type=int, help="controllers to start (default: 3 for three or "
                                              "more brokers, 1 for two, none for one)")
    @argument("-d", "--data-dir", help="keep the data here (default: a temporary directory)")
    @argument("--broker-args", default="", help='extra broker options, e.g. "--num-partitions 3"')
    @argument("--security", choices=SECURITY_MODES, default=SASL,
              help="sasl (default): SASL/SCRAM listeners, ACLs and an admin principal only this "
                   "account can read; none: open listeners, as Kafka's PLAINTEXT")
    @argument("--tls", action="store_true",
              help="with --security sasl: TLS listeners (SASL_SSL) and a CA of the cluster's "
                   "own, which the client settings name (ssl.ca.location)")
    @_one_line_errors
    def log_cluster(self, line: str):
        """Start, stop, inspect or break the notebook's cluster, or connect to another one.

        start: --brokers brokers (default 3) and --controllers controllers (default 3 for three
        or more brokers, 1 for two, none for one) on 127.0.0.1; the controllers elect one of
        themselves, the active controller, by Raft. A cluster these magics started before is
        stopped first, and its live views closed, so Run All works again after a failed cell.
        stop: stop them all (or forget a connection).

        credentials: the settings any Kafka client needs to reach the cluster as its owner
        (``cluster.client_config()``), and a kcat command line that uses them.

        status: the controller quorum (each controller's state, Raft role, epoch, leader,
        committed offset and lag), shown, then every replica's state, returned as a DataFrame;
        status quorum, status partitions: one of the two, returned. events: the latest cluster
        events.

        kill, restart, pause, resume, isolate, heal BROKER_ID: a broker fault.
        kill, pause, isolate controller [ID]: a controller fault, by default on the active
        controller; if it was the active one, waits (and says so) until another takes over.
        resume, restart, heal controller [ID]: undo it, by default for every paused, down or
        isolated controller (restart with none down: the active one); waits until each follows
        the active controller, caught up.

        connect HOST:PORT[,HOST:PORT...]: use a cluster this kernel did not start. The address
        is checked at once (a Kafka Metadata answer within a few seconds, from every advertised
        broker too); a wrong one is refused with the reason, and a previous connection is kept.
        disconnect: forget the connection; the magics then have no cluster until the next
        start or connect. The cluster itself keeps running: it is not this kernel's to stop.
        """
        args = parse_argstring(self.log_cluster, line)
        if args.action in TARGET_ACTIONS:
            return getattr(self, f"_{args.action}")(args)
        cluster = self._local()
        if args.action == "status":
            return self._status(cluster, args.target)
        if args.action == "events":
            return events_frame(cluster)
        if args.action == "credentials":
            return credentials_frame(cluster)
        if args.target == CONTROLLER:
            controller_id = self._controller_id(cluster, args.controller_id)
            for text in controller_fault(cluster, args.action, controller_id):
                print(text)
            return None
        broker_id = self._broker_id(cluster, args.target)
        if args.controller_id is not None:
            raise UsageError(f"{args.action} takes one broker id, or controller [ID]")
        with waiting(f"broker {broker_id}: {args.action}…"):
            getattr(cluster, args.action)(broker_id)
        print(f"broker {broker_id}: {args.action} done")
        return None

    @staticmethod
    def _status(cluster: LocalCluster, view: str | None):
        """Both frames (the quorum displayed above the partitions returned), or the one named."""
        if view is not None and view not in STATUS_VIEWS:
            raise UsageError(f"status {view}: say status, status quorum or status partitions")
        if view == "quorum":
            return quorum_frame(cluster)
        if view is None and cluster.controllers:
            from IPython.display import display

            display(quorum_frame(cluster))
        return partitions_frame(cluster)

    def _start(self, args) -> LocalCluster:
        """Start a local cluster; one already started by these magics is stopped first (its
        live views closed), so a notebook's Run All works after any failed cell."""
        self._refuse_if_connected()
        # IPython's argument splitter keeps the quotes around "--x 1": split what they held too.
        broker_args = tuple(t for part in shlex.split(args.broker_args) for t in shlex.split(part))
        cluster = LocalCluster(brokers=args.brokers, data_dir=args.data_dir,
                               broker_args=broker_args, controllers=args.controllers,
                               security=args.security, tls=args.tls)
        old = self.cluster
        if old is not None:
            with waiting("stopping the running cluster…"):
                self._close_views()
                old.stop()
            self.cluster = None
        controllers = _count(len(cluster.controllers), 'controller')
        with waiting(f"starting {controllers} and {_count(args.brokers, 'broker')}…"):
            self.cluster = cluster.start()
        if old is not None:
            print(f"stopped the running cluster ({_count(len(old.brokers), 'broker')}) and "
                  f"started a new one")
        return cluster

    def _close_views(self) -> None:
        """Close every live view %log_watch opened (each refreshes from the cluster)."""
        views, self._views = self._views, []
        for view in views:
            view.close()

    def _connect(self, args) -> None:
        if not args.target:
            raise UsageError("connect needs HOST:PORT[,HOST:PORT...]")
        if self.cluster is not None:
            raise UsageError("a local cluster is running: %log_cluster stop first")
        with waiting(f"asking {args.target} for its brokers and topics "
                     f"(up to {CONNECT_TIMEOUT_S:g} s)…"):
            metadata = check_cluster(args.target)
        self.bootstrap = args.target
        topics = sum(not name.startswith("__") for name in metadata.topics)
        print(f"connected to {args.target}: {_count(len(metadata.brokers), 'broker')}, "
              f"{_count(topics, 'topic')}")

    def _disconnect(self, _args) -> None:
        if self.cluster is not None:
            raise UsageError("the magics use the local cluster, not a connection: "
                             "%log_cluster stop stops it")
        if self.bootstrap is None:
            print("not connected: nothing to do")
            return
        print(f"disconnected from {self.bootstrap}; it keeps running")
        self.bootstrap = None

    def _stop(self, _args) -> None:
        if self.bootstrap is not None:
            return self._disconnect(None)
        if self.cluster is not None:
            with waiting("stopping the cluster…"):
                self.cluster.stop()
            print("cluster stopped")
        self.cluster = None
        return None

    def _refuse_if_connected(self) -> None:
        if self.bootstrap is not None:
            raise UsageError(f"connected to {self.bootstrap}: %log_cluster disconnect first")

    def _local(self) -> LocalCluster:
        if self.cluster is None:
            raise UsageError("this needs a local cluster: %log_cluster start")
        return self.cluster

    @staticmethod
    def _broker_id(cluster: LocalCluster, target: str | None) -> int:
        if target is None or not target.isdigit() or int(target) not in cluster.brokers:
            controller = f", or {CONTROLLER} [ID]" if cluster.controllers else ""
            raise UsageError(f"name a broker: one of {sorted(cluster.brokers)}{controller}")
        return int(target)

    @staticmethod
    def _controller_id(cluster: LocalCluster, text: str | None) -> int | None:
        if text is None:
            return None
        if not text.isdigit():
            raise UsageError(f"{text!r} is not a controller id; controllers are "
                             f"{cluster.controllers}")
        return int(text)

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
        view = ClusterView(self._local(), refresh_s=args.refresh)
        self._views.append(view)
        return view

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

    # -- %%log_txn -----------------------------------------------------------------------------

    @cell_magic
    @magic_arguments()
    @argument("topic", nargs="?", help="where the lines go until a [TOPIC] line names another")
    @argument("--id", dest="transactional_id", default=DEFAULT_TRANSACTIONAL_ID,
              help=f"the transactional.id (default {DEFAULT_TRANSACTIONAL_ID})")
    @argument("-s", "--separator", help="split each line into key<SEP>value")
    @argument("-p", "--partition", type=int, help="write to this partition")
    @argument("--abort", action="store_true", help="write the records, then abort")
    @_one_line_errors
    def log_txn(self, line: str, cell: str):
        """Write the cell's lines as one transaction: all committed, or (--abort, or any
        failure) all aborted. Prints what happened; returns each record's partition and offset.

        A line [TOPIC] sends the lines after it to TOPIC, so one transaction spans topics:

            %%log_txn orders --id shop -s :
            alice:book
            [audit]
            alice:ordered a book

        A new producer with the --id starts each cell: its epoch fences older producers of the
        same id, and the coordinator aborts what they left open.
        """
        args = parse_argstring(self.log_txn, line)
        records = _txn_records(cell, args.topic, args.separator)  # a bad cell writes nothing
        target = self._target()
        with waiting(f"writing {_count(len(records), 'record')} in a transaction of "
                     f"{args.transactional_id}…"):
            txn = Transaction(target, args.transactional_id)
            try:
                with txn:  # commits at the end, aborts on an exception
                    for topic, (key, value) in records:
                        txn.produce(topic, value, key=key, partition=args.partition)
                    if args.abort:
                        txn.abort()
            except LogClientError as error:
                raise LogClientError(f"aborted, nothing committed: {error}") from None
        print(txn.summary())
        return txn.records

    # -- %log_consume ---------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("topic")
    @argument("-n", "--count", type=int, help="stop after this many records")
    @argument("--from", dest="start",
              help="earliest (default), latest, or an offset")
    @argument("-p", "--partition", type=int, action="append", help="only this partition")
    @argument("-g", "--group", help="read as a member of this group, and commit")
    @argument("--timeout", type=float, default=CONSUME_TIMEOUT_S,
              help="seconds to wait for a record")
    @argument("--isolation", choices=ISOLATION_LEVELS,
              help="read_committed (default): skip aborted transactions, stop before open "
                   "ones; read_uncommitted: every record")
    @argument("--protocol", choices=GROUP_PROTOCOLS, default=GROUP_PROTOCOLS[0],
              help="with --group, how it rebalances: classic (default: JoinGroup/SyncGroup) or "
                   "consumer (KIP-848, group.protocol=consumer: the coordinator assigns)")
    @argument("--assignor", choices=REMOTE_ASSIGNORS,
              help="with --protocol consumer: the coordinator's assignor (group.remote.assignor; "
                   "default: the coordinator's, uniform)")
    @argument("--share", metavar="GROUP",
              help="read as a member of this share group (KIP-932: the topic as a queue); "
                   "every record is accepted unless --release or --reject says otherwise")
    @argument("--release", nargs="?", const=EVERY_RECORD, metavar="P:O,...",
              help="with --share: release the records named (PARTITION:OFFSET,...), or alone "
                   "every record: back to the group, delivered again with a higher count")
    @argument("--reject", nargs="?", const=EVERY_RECORD, metavar="P:O,...",
              help="with --share: reject the records named (PARTITION:OFFSET,...), or alone "
                   "every record: archived, never delivered again")
    @_one_line_errors
    def log_consume(self, line: str):
        """Read records into a DataFrame: all up to the high watermark, or --count of them.

        %log_consume orders --group billing --protocol consumer reads as a member of a
        consumer group of KIP-848's protocol (%log_groups billing shows its epochs).

        %log_consume jobs --share workers reads as a member of the share group workers what
        the group has for it now (or --count records), with each record's delivery count,
        accepting them; --release 0:3 hands record 3 of partition 0 back to the group (the
        next read gets it, delivery count one higher), --reject 0:4 archives it, and
        --release or --reject alone does so with every record. A read that releases a record
        stops after that poll, so it is not handed the same record again. Prints how each was
        acknowledged. Where a share group starts is the group's share.auto.offset.reset, not
        --from: %log_groups workers --set share.auto.offset.reset=earliest before its first
        read makes it start at the beginning."""
        args = parse_argstring(self.log_consume, line)
        if args.share is not None:
            return self._consume_share(args)
        if args.release is not None or args.reject is not None:
            raise UsageError("--release and --reject acknowledge a share group's records: "
                             "add --share GROUP")
        start_text = args.start or "earliest"
        start = int(start_text) if start_text.isdigit() else start_text
        isolation = args.isolation or ISOLATION_LEVELS[0]
        read = functools.partial(consume, self._target(), args.topic, count=args.count,
                                 start=start, partitions=args.partition, group=args.group,
                                 timeout_s=args.timeout, isolation_level=isolation,
                                 group_protocol=args.protocol, remote_assignor=args.assignor)
        waits = waits_for_new_records(start, args.count)
        if not waits and args.group is None:
            return read()  # up to each partition's HW, known now: nothing to wait for
        with waiting(_consume_wait(args, waits)) as status:
            frame = read()
            if waits and len(frame) < args.count:
                status.done(f"{len(frame)} of {args.count} records: no more arrived within "
                            f"{args.timeout:g} s")
        return frame

    def _consume_share(self, args):
        """%log_consume TOPIC --share GROUP: read_share, its summary printed."""
        refused = [(flag, given) for flag, given in (
            ("--group", args.group), ("--partition", args.partition), ("--from", args.start),
            ("--isolation", args.isolation),
            ("--protocol", args.protocol != GROUP_PROTOCOLS[0] or None),
            ("--assignor", args.assignor)) if given is not None]
        if refused:
            raise UsageError(f"{refused[0][0]} does not go with --share: a share group's "
                             "coordinator assigns the partitions and the group says where it "
                             "starts (share.auto.offset.reset)")
        if args.release == EVERY_RECORD and args.reject == EVERY_RECORD:
            raise UsageError("--release and --reject alone both mean every record: name the "
                             "records of one of them (PARTITION:OFFSET,...)")
        every = ("release" if args.release == EVERY_RECORD
                 else "reject" if args.reject == EVERY_RECORD else "accept")
        named = {flag: _records(flag, text) for flag, text in (
            ("release", args.release), ("reject", args.reject))}
        wait = (f"joining share group {args.share}, then reading "
                + (f"{_count(args.count, 'record')} of {args.topic}…" if args.count
                   else f"what it has of {args.topic} for us…"))
        with waiting(wait):
            done = read_share(self._target(), args.topic, args.share, count=args.count,
                              timeout_s=args.timeout, acknowledge=every,
                              release=named["release"], reject=named["reject"])
        print(done.summary())
        return done.frame

    # -- %log_browse ----------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("topic")
    @argument("-p", "--partition", type=int, default=0, help="the partition (default 0)")
    @argument("--from", dest="start", default="earliest",
              help="an offset, earliest (default), latest (the last page), or -N (N from the end)")
    @argument("-n", "--count", type=int, default=BROWSE_COUNT_DEFAULT,
              help=f"records per page (default {BROWSE_COUNT_DEFAULT}, at most {BROWSE_COUNT_MAX})")
    @argument("--key", default="", help="only records with this whole key")
    @argument("--contains", default="", help="only records whose value contains this text")
    @argument("--header", default="", help="only records with this header: NAME or NAME=VALUE")
    @argument("--since", default="", help="only records at or after this time (UTC)")
    @argument("--until", default="", help="only records at or before this time (UTC)")
    @argument("--frame", action="store_true", help="return the page as a DataFrame, no widget")
    @_one_line_errors
    def log_browse(self, line: str):
        """Browse a partition's records a page at a time: key, value (text, pretty JSON or hex),
        headers, timestamp; filters; "as DataFrame" puts the page shown into the notebook.

        browser = %log_browse orders -p 1 --from -20 --contains refund
        df = %log_browse orders --from 100 -n 500 --frame
        """
        args = parse_argstring(self.log_browse, line)
        query = {"partition": args.partition, "start": _browse_start(args.start),
                 "count": args.count, "key": _unquoted(args.key),
                 "value_contains": _unquoted(args.contains), "header": _unquoted(args.header),
                 "since": _unquoted(args.since), "until": _unquoted(args.until)}
        from ..widgets.browser import MessageBrowser  # anywidget only once a browse is asked for

        read = browse if args.frame else MessageBrowser  # "" is no filter to both
        # a quick page says nothing; a filter scanning a long log says so after a second
        with waiting(f"reading {args.topic} partition {args.partition}…"):
            return read(self._target(), args.topic, **query)

    # -- groups ---------------------------------------------------------------------------------

    @line_magic
    @magic_arguments()
    @argument("action", choices=("add", "list", "remove"))
    @argument("principal", nargs="?", help="User:NAME (or NAME), User:* for everyone")
    @argument("operations", nargs="?",
              help="comma-separated: read, write, create, delete, alter, describe, all, ...")
    @argument("--topic", help="a topic (with --prefixed: every topic starting with it)")
    @argument("--group", help="a consumer or share group (or prefix)")
    @argument("--transactional-id", help="a transactional id (or prefix)")
    @argument("--cluster", action="store_true", help="the cluster itself")
    @argument("--prefixed", action="store_true", help="the name is a prefix")
    @argument("--deny", action="store_true", help="a DENY (wins over every ALLOW)")
    @argument("--host", default="*", help="the client host it applies to (default: any)")
    @_one_line_errors
    def log_acl(self, line: str):
        """%log_acl add PRINCIPAL OPS (--topic|--group|--transactional-id NAME|--cluster)
        [--prefixed] [--deny] [--host H]: grant (or deny) operations to a principal.

        %log_acl list [PRINCIPAL] [--topic NAME ...]: the ACLs, as a DataFrame.
        %log_acl remove PRINCIPAL OPS (resource) [--prefixed] [--deny]: delete those ACLs.

        The cluster denies what no ACL allows (Kafka's StandardAuthorizer); its owner (the
        admin principal) and its brokers are super users, allowed everything.
        """
        args = parse_argstring(self.log_acl, line)
        target = self._target()
        if args.action == "list":
            kind, name = _acl_resource(args, required=False)
            return acls_frame(target, args.principal, kind, name)
        specs = _acl_specs(args)
        if args.action == "add":
            add_acls(target, specs)
            print(f"added {_count(len(specs), 'ACL')}")
            return None
        print(f"removed {_count(remove_acls(target, specs), 'ACL')}")
        return None

    @line_magic
    @magic_arguments()
    @argument("action", choices=("add", "list", "remove"))
    @argument("user", nargs="?")
    @argument("--password", help="default: a new random one, shown once")
    @argument("--mechanism", default="SCRAM-SHA-512", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
    @_one_line_errors
    def log_user(self, line: str):
        """%log_user add NAME [--password P] [--mechanism M]: a SCRAM user (Kafka's
        AlterUserScramCredentials); returns the client settings that sign in as it.

        %log_user list: every SCRAM user and its mechanisms. %log_user remove NAME: delete it.
        """
        args = parse_argstring(self.log_user, line)
        target = self._target()
        if args.action == "list":
            return users_frame(target)
        if not args.user:
            raise UsageError(f"%log_user {args.action} needs a user name")
        if args.action == "remove":
            print(f"removed {args.user} ({_count(remove_user(target, args.user), 'credential')})")
            return None
        password = add_user(target, args.user, args.password, args.mechanism)
        print(f"user {args.user} added ({args.mechanism}); it may do nothing an ACL does not "
              f"allow")
        return user_config(target, args.user, password, args.mechanism)

    @line_magic
    @_one_line_errors
    def log_lag(self, line: str):
        """%log_lag [GROUP]: committed offset, HW, LEO and lag per group and partition."""
        return lag_frame(self._source(), line.strip() or None)

    @line_magic
    @magic_arguments()
    @argument("group", nargs="?")
    @argument("--set", dest="set_configs", action="append", default=[], metavar="KEY=VALUE",
              help="set a group config (repeatable), e.g. share.auto.offset.reset=earliest")
    @argument("--unset", action="append", default=[], metavar="KEY",
              help="a group config back to the broker's default (repeatable)")
    @argument("--configs", action="store_true", help="show the group's configs")
    @_one_line_errors
    def log_groups(self, line: str):
        """%log_groups: every group, classic, consumer (KIP-848) or share (KIP-932; a local
        cluster's) in its type column, its state, assignor, member count, coordinator, and a
        consumer or share group's group and assignment epochs.

        %log_groups GROUP: that group's row, shown, then one row per member, returned: who it
        is and its assignment; for a consumer group also its member epoch and state, the
        partitions it must still revoke (pending_revocation), those of its target another
        member has not released yet, and its target assignment. For a share group, its share
        partitions are shown between the two: start and end offsets, lag, and how many
        in-flight records are available, acquired, acknowledged and archived.

        %log_groups GROUP --set KEY=VALUE [--unset KEY] [--configs]: change the group's configs
        (Kafka's kafka-configs.sh --entity-type groups; a group need not exist yet), e.g.
        --set share.auto.offset.reset=earliest so a new share group reads from the start;
        returns all its configs."""
        args = parse_argstring(self.log_groups, line)
        group_id = args.group
        if not group_id:
            if args.set_configs or args.unset or args.configs:
                raise UsageError("--set, --unset and --configs need a GROUP")
            return groups_frame(self._source())
        if args.set_configs or args.unset or args.configs:
            alter_group_configs(self._source(), group_id, _configs(args.set_configs),
                                args.unset)
            return group_configs_frame(self._source(), group_id)
        from IPython.display import display

        group = groups_frame(self._source(), group_id)
        display(group)
        if self.cluster is not None and group.type.tolist() == ["share"]:
            display(share_partitions_frame(self.cluster, group_id))
        return members_frame(self._source(), group_id)


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
    @argument("--master", default=None,
              help="spark://HOST:PORT (a standalone cluster) or sc://HOST:PORT (Spark Connect) "
                   "for the kernel's first Spark session; local[2] by default")
    @_one_line_errors
    def log_spark(self, line: str):
        """A topic as a Spark DataFrame (``df = %log_spark orders``), on the kernel's
        SparkSession: local unless --master names a standalone cluster or a Connect server."""
        args = parse_argstring(self.log_spark, line)
        to_spark = _spark_reader()
        try:
            return to_spark(self._target(), args.topic, starting=_partition_offsets(args.starting),
                            ending=_partition_offsets(args.ending), text=not args.bytes,
                            include_headers=args.headers, master=args.master,
                            **_configs(args.option))
        except Exception as error:  # a JVM-side failure: keep the line that names the cause
            if type(error).__module__.startswith("pyspark"):
                raise UsageError(_spark_cause(str(error))) from None
            raise


def _consume_wait(args, waits: bool) -> str:
    """What a consume that may wait (to join a group, for new records) says first."""
    protocol = " (consumer protocol)" if args.protocol == "consumer" else ""
    joining = f"joining group {args.group}{protocol}, then " if args.group else ""
    if not waits:
        return f"{joining}reading {args.topic} up to its end…"
    return (f"{joining}waiting for {_count(args.count, 'new record')} of {args.topic} "
            f"(up to {args.timeout:g} s for each)…")


def _records(flag: str, text: str | None) -> list[tuple[int, int]]:
    """--release/--reject's PARTITION:OFFSET,... as pairs; none for nothing, or every record."""
    if text is None or text == EVERY_RECORD:
        return []
    records = []
    for pair in text.split(","):
        partition, found, offset = pair.strip().partition(":")
        if not (found and partition.isdigit() and offset.isdigit()):
            raise UsageError(f"--{flag} {text}: name records as PARTITION:OFFSET,... (e.g. "
                             f"0:3,0:4), or give --{flag} alone for every record")
        records.append((int(partition), int(offset)))
    return records


def _browse_start(text: str) -> str | int:
    """--from as browse takes it: earliest, latest, or an offset (negative: from the end)."""
    if text in ("earliest", "latest"):
        return text
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--from {text!r}: an offset, earliest, latest or -N") from None


def _unquoted(text: str) -> str:
    """``'a b'`` as ``a b``: IPython's argument splitter keeps the quotes that group words."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _spark_reader():
    """``to_spark``; importing PySpark takes a second or two the first time, so say so."""
    first = "pyspark" not in sys.modules
    with waiting("importing PySpark…") if first else contextlib.nullcontext():
        from ..spark import to_spark
    return to_spark


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


def _txn_records(cell: str, topic: str | None, separator: str | None
                 ) -> list[tuple[str, tuple[str | None, str]]]:
    """(topic, (key, value)) for each line of a %%log_txn cell; [TOPIC] lines switch topics."""
    records = []
    for text in cell.splitlines():
        if not text:
            continue
        if len(text) > 2 and text[0] == "[" and text[-1] == "]":
            topic = text[1:-1]
        elif topic is None:
            raise UsageError("name a topic: %%log_txn TOPIC, or a [TOPIC] line first")
        else:
            records.append((topic, _split(text, separator)))
    if not records:
        raise UsageError("no records: one per line of the cell")
    return records


def _split(text: str, separator: str | None) -> tuple[str | None, str]:
    if separator is None:
        return None, text
    key, found, value = text.partition(separator)
    if not found:
        raise UsageError(f"line {text[:40]!r} has no separator {separator!r}")
    return key, value
