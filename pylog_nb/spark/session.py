"""A local SparkSession for a notebook, and ``to_spark``: a topic as a DataFrame in one call."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import DataFrame, SparkSession

from ..client.status import waiting
from .offsets import ClusterOffsets
from .options import EARLIEST, LATEST, SparkSourceError, parse_read_options
from .source import SHORT_NAME, PylogDataSource, plan_batch

LOOPBACK = "127.0.0.1"
START_S_TYPICAL = 15  # what the first start of the JVM and SparkContext takes on a laptop
CORES_DEFAULT = 2
# The JVM stops Spark in its shutdown hooks, ~1 s; a kernel being shut down is killed after 5 s.
JVM_EXIT_WAIT_S = 3.0
SHUFFLE_PARTITIONS = 4  # Spark's 200 is for clusters; a notebook's data fits a few tasks
LOCAL_SETTINGS = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.ui.showConsoleProgress": "false",  # progress bars would land in notebook cells
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.sql.session.timeZone": "UTC",
}


def local_spark(app_name: str = "pylog-nb", *, cores: int = CORES_DEFAULT,
                settings: Mapping[str, str] | None = None) -> SparkSession:
    """The notebook's SparkSession (created once), with the ``pylog`` source registered.

    Everything listens on 127.0.0.1, the web UI included, and Python workers run this very
    interpreter, so they import the same pylog_nb and pyarrow as the kernel. The JVM's own
    output (log4j lines, task stack traces) goes to :func:`spark_log_path`, not into cells; the
    file goes when the interpreter exits, after the JVM. The first call says what it waits for
    until the session is ready, the JVM's start and the source's registration included.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # the UI binds where this says
    conf = SparkConf().setMaster(f"local[{cores}]").setAppName(app_name).setAll(
        list({**LOCAL_SETTINGS, **(settings or {})}.items()))
    if SparkContext._gateway is not None:
        return _session(conf)
    with waiting(f"starting Spark (about {START_S_TYPICAL} s)…", delay_s=0) as status:
        _start_jvm(conf)  # the first session of this kernel starts the JVM
        spark = _session(conf)  # its first session and source take seconds more
        status.done(f"Spark started in {status.elapsed_s:.0f} s")
    return spark


def _session(conf: SparkConf) -> SparkSession:
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PylogDataSource)
    return spark


def _start_jvm(conf: SparkConf) -> None:
    log_path = spark_log_path()
    with open(log_path, "ab") as log:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
    atexit.register(_stop_jvm_and_remove_log, gateway.proc, log_path)
    SparkContext(conf=conf, gateway=gateway)


def _stop_jvm_and_remove_log(jvm: subprocess.Popen, log_path: Path) -> None:
    """At interpreter exit: stop the JVM (it exits once its stdin closes, as PySpark
    arranges), then remove its log, so that no kernel leaves one in the temp directory."""
    context = SparkContext._active_spark_context
    if context is not None:  # first, or the JVM's going would break Python's end of Spark
        with contextlib.suppress(Exception):  # a JVM already gone: nothing left to stop
            context.stop()
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(JVM_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
    log_path.unlink(missing_ok=True)


def spark_log_path() -> Path:
    """Where this kernel's JVM writes its log (removed when the kernel exits)."""
    return Path(tempfile.gettempdir()) / f"pylog-nb-spark-{os.getpid()}.log"


def to_spark(source, topic: str, *, spark: SparkSession | None = None,
             starting: str | Mapping[int, int] = "earliest",
             ending: str | Mapping[int, int] = "latest", text: bool = True,
             include_headers: bool = False, **options: str) -> DataFrame:
    """``topic`` of ``source`` (a LocalCluster or bootstrap servers) as a batch DataFrame.

    ``starting`` and ``ending`` take Spark's Kafka values (earliest, latest, offsets JSON) or
    ``{partition: offset}``, where partitions left out start at the earliest and end at the
    latest offset. ``options`` are any other option of the source. With ``text`` the key and
    value are UTF-8 strings rather than Spark's binary. Options, the topic and the offset
    ranges are checked here, with the planning Spark runs later, so a mistake (an offset past
    a partition's end) is one line in the call that made it, before Spark starts.
    """
    given = {"bootstrap.servers": getattr(source, "bootstrap_servers", source),
             "subscribe": topic, "includeHeaders": str(include_headers).lower(),
             **{k: str(v) for k, v in options.items()}}
    checked = parse_read_options(given, streaming=False)
    partitions = [p for _t, p in ClusterOffsets(checked.client).partitions(
        checked.topics, missing_ok=False)]
    given["startingOffsets"] = _offsets_option(topic, starting, partitions, EARLIEST)
    given["endingOffsets"] = _offsets_option(topic, ending, partitions, LATEST)
    plan_batch(parse_read_options(given, streaming=False))  # Spark plans again when it reads
    spark = spark or local_spark()
    # the source's schema comes from a Python worker; the first one takes seconds to start
    with waiting("planning the read in Spark (in a Python worker)…"):
        frame = spark.read.format(SHORT_NAME).options(**given).load()
    if text:
        frame = frame.withColumns({"key": frame.key.cast("string"),
                                   "value": frame.value.cast("string")})
    return frame


def _offsets_option(topic: str, value: str | Mapping[int, int], partitions: list[int],
                    default: int) -> str:
    if not isinstance(value, Mapping):
        return value
    unknown = sorted(set(value) - set(partitions))
    if unknown:
        raise SparkSourceError(f"{topic} has no partition {unknown[0]} "
                               f"(it has {len(partitions)})")
    return json.dumps({topic: {str(p): int(value.get(p, default)) for p in partitions}})
