"""The notebook's SparkSession (local, a standalone cluster or Spark Connect), and ``to_spark``:
a topic as a DataFrame in one call."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.errors import AnalysisException
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
CONNECT_SCHEME = "sc://"
LOOPBACK_NAMES = {LOOPBACK, "localhost"}
# A remote cluster's executors must reach the driver: Spark picks its address, not loopback.
REMOTE_SETTINGS = {key: value for key, value in LOCAL_SETTINGS.items()
                   if not key.startswith("spark.driver.")}
# What a Connect session may set (the server's own settings are the server's)
CONNECT_SETTINGS = {"spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
                    "spark.sql.session.timeZone": "UTC"}


def local_spark(app_name: str = "pylog-nb", *, master: str | None = None,
                cores: int = CORES_DEFAULT,
                settings: Mapping[str, str] | None = None) -> SparkSession:
    """The notebook's SparkSession (created once), with the ``pylog`` source registered.

    By default Spark runs in this kernel (``local[cores]``). Everything listens on 127.0.0.1,
    the web UI included, and Python workers run this very interpreter, so they import the same
    pylog_nb and pyarrow as the kernel. The JVM's own output (log4j lines, task stack traces)
    goes to :func:`spark_log_path`, not into cells; the file goes when the interpreter exits,
    after the JVM. The first call says what it waits for until the session is ready, the JVM's
    start and the source's registration included.

    ``master`` is any other Spark master: a standalone cluster (``spark://host:7077``), whose
    executors get this kernel's pylog_nb as a zip (``addPyFile``), so they need only its
    dependencies (confluent-kafka, pyarrow, pandas, kio, crc32c, lz4, cramjam) and the same
    Python version; or Spark Connect (``sc://host:15002``), where the server's Python workers
    get the zip as an artifact of the session. A kernel runs one SparkContext: asking for
    another master once it runs is a one-line error (restart the kernel to change it).
    """
    global _CONNECTED
    if master is not None and master.startswith(CONNECT_SCHEME):
        _CONNECTED = _connect_session(master, settings)
        return _CONNECTED
    running = SparkContext._active_spark_context
    if master is None and running is None and _CONNECTED is not None \
            and not getattr(_CONNECTED, "is_stopped", False):
        return _CONNECTED  # the kernel's Spark is a Connect server
    if running is not None:  # the kernel's Spark, wherever it runs
        if master is not None and master != running.master:
            raise SparkSourceError(f"this kernel's Spark runs on {running.master}; restart the "
                                   f"kernel to use {master}")
        master = str(running.master)
    master = master or f"local[{cores}]"
    loopback = master.startswith("local") or _host(master) in LOOPBACK_NAMES
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master.startswith("local"):
        os.environ["PYSPARK_PYTHON"] = sys.executable  # workers in this kernel: this interpreter
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # unless told which there
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # the UI binds where this says
    chosen = {**(LOCAL_SETTINGS if loopback else REMOTE_SETTINGS), **(settings or {})}
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(chosen.items()))
    if SparkContext._gateway is not None:
        return _session(conf)
    where = "" if master.startswith("local") else f" on {master}"
    with waiting(f"starting Spark{where} (about {START_S_TYPICAL} s)…", delay_s=0) as status:
        _start_jvm(conf)  # the first session of this kernel starts the JVM
        spark = _session(conf)  # its first session and source take seconds more
        status.done(f"Spark started in {status.elapsed_s:.0f} s")
    return spark


spark_session = local_spark  # the same function, by a name that fits a cluster's session


def _host(master: str) -> str:
    """spark://host:7077 (or spark://h1:7077,h2:7077) -> host (the first one)."""
    address = master.split("://", 1)[-1].split(",", 1)[0]
    return address.rsplit(":", 1)[0].strip("[]")


def _session(conf: SparkConf) -> SparkSession:
    _one_line_save_mode_errors()
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    context = spark.sparkContext
    context.setLogLevel("ERROR")
    if not str(context.master).startswith("local"):
        _ship_package(context)  # before the source's registration, which captures the includes
    spark.dataSource.register(PylogDataSource)
    return spark


def _ship_package(context: SparkContext) -> None:
    """Executors import this kernel's pylog_nb from a zip Spark hands them (once per kernel)."""
    zipped = package_zip()
    if all(Path(include).name != zipped.name for include in context._python_includes or []):
        context.addPyFile(str(zipped))


def _connect_session(url: str, settings: Mapping[str, str] | None) -> SparkSession:
    """A Spark Connect session: the server plans and runs; pylog_nb reaches its Python workers
    as an artifact of the session, and the source is registered in the session."""
    _one_line_save_mode_errors()
    builder = SparkSession.builder.remote(url)
    for key, value in {**CONNECT_SETTINGS, **(settings or {})}.items():
        builder = builder.config(key, value)
    with waiting(f"connecting to Spark Connect at {url}…"):
        spark = builder.getOrCreate()
        if _CONNECT_READY.get(url) is not spark:  # a new session: it has neither yet
            spark.addArtifacts(str(package_zip()), pyfile=True)
            spark.dataSource.register(PylogDataSource)
            _CONNECT_READY[url] = spark
    return spark


SAVE_MODE_ERROR = "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
SAVE_MODE_FIX = (f'the {SHORT_NAME} sink only appends to topics: write with .mode("append") '
                 "before .save()")


def _one_line_save_mode_errors() -> None:
    """In IPython, ``.save()`` without a mode (Spark's default, ErrorIfExists, which a Python
    data source cannot take) is one line naming the fix, not a Py4J or gRPC traceback; any
    other error shows as before. A shell's own custom handler is left alone."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or shell.custom_exceptions not in ((), (AnalysisException,)):
        return

    def handler(shell, etype, value, tb, tb_offset=None):
        if _is_save_mode_error(value):
            stb = [f"{etype.__name__}: {SAVE_MODE_FIX}"]
            shell._showtraceback(etype, value, stb)  # what a kernel shows as the cell's error
            return stb
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None

    shell.set_custom_exc((AnalysisException,), handler)


def _is_save_mode_error(error: BaseException) -> bool:
    condition = getattr(error, "getCondition", lambda: None)()
    return condition == SAVE_MODE_ERROR and f'"{SHORT_NAME}"' in str(error)


def package_zip() -> Path:
    """This kernel's pylog_nb as a zip (pylog_nb/... inside), made once and removed at exit:
    what executors of a cluster import, whether or not pylog_nb is installed there."""
    global _PACKAGE_ZIP
    if _PACKAGE_ZIP is None or not _PACKAGE_ZIP.exists():
        package = Path(__file__).resolve().parent.parent
        handle, name = tempfile.mkstemp(prefix="pylog_nb-", suffix=".zip")
        os.close(handle)
        with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(package.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, Path(package.name) / path.relative_to(package))
        _PACKAGE_ZIP = Path(name)
        atexit.register(_PACKAGE_ZIP.unlink, missing_ok=True)
    return _PACKAGE_ZIP


_CONNECTED: SparkSession | None = None  # the Connect session local_spark made last
_PACKAGE_ZIP: Path | None = None
_CONNECT_READY: dict[str, SparkSession] = {}  # Connect sessions with the package and source


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


def to_spark(source, topic: str, *, spark: SparkSession | None = None, master: str | None = None,
             starting: str | Mapping[int, int] = "earliest",
             ending: str | Mapping[int, int] = "latest", text: bool = True,
             include_headers: bool = False, **options: str) -> DataFrame:
    """``topic`` of ``source`` (a LocalCluster or bootstrap servers) as a batch DataFrame.

    ``starting`` and ``ending`` take Spark's Kafka values (earliest, latest, offsets JSON) or
    ``{partition: offset}``, where partitions left out start at the earliest and end at the
    latest offset. ``options`` are any other option of the source. With ``text`` the key and
    value are UTF-8 strings rather than Spark's binary. Options, the topic and the offset
    ranges are checked here, with the planning Spark runs later, before the session (the
    kernel's, or :func:`local_spark` on ``master``) is made, so a mistake (an offset past
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
    spark = spark or local_spark(master=master)
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
