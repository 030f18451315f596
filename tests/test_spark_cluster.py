"""The pylog source on Spark beyond local[N]: a standalone cluster (a master and two workers) and
a Spark Connect server, all started here from PySpark's own jars on 127.0.0.1.

Their Python workers run an interpreter that has every dependency of pylog_nb but not pylog_nb
itself, so a read, a write or a stream only works if the session ships the package (a zip):
each test also asks an executor where it imported pylog_nb from. Each driver is a fresh
interpreter: one that has made a local SparkContext cannot make another on another master.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clients import create_topic, produce, read_to_end

pyspark = pytest.importorskip("pyspark")

SPARK_HOME = Path(pyspark.__file__).parent
LOOPBACK = "127.0.0.1"
START_WAIT_S = 120  # a JVM's start takes seconds, minutes on a loaded two-core machine
DRIVER_WAIT_S = 300
STOP_WAIT_S = 15
WORKERS = 2
WORKER_MEMORY = "512m"  # an executor's least is 450 MB (Spark reserves 300 MB of it)
MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
CONNECT_URL = re.compile(r"Spark Connect server started at: ([\d.]+:\d+)")
LEFT_OUT = ("pylog_nb", "__editable__", "_pylog_nb")  # what the workers' Python must not see

STANDALONE_DRIVER = """
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
from pyspark.sql import functions as F
from pylog_nb.spark import spark_session

bootstrap, master, source, copy, checkpoint = sys.argv[1:]
shell = InteractiveShell.instance()  # a notebook's: a session made in it shows errors its way
took, started = {}, time.monotonic()

def lap(name):
    global started
    took[name] = round(time.monotonic() - started, 1)
    started = time.monotonic()

spark = spark_session("pylog-nb-standalone", master=master,
                      settings={"spark.executor.memory": "512m", "spark.cores.max": "2"})
jvm_context = spark.sparkContext._jsc.sc()
out = {"master": spark.sparkContext.master}
lap("session")

rows = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string")
rows.write.format("pylog").option("bootstrap.servers", bootstrap) \\
    .option("topic", source).mode("append").save()
lap("write")
read = spark.read.format("pylog").option("bootstrap.servers", bootstrap) \\
    .option("subscribe", source).load()
out["read"] = sorted(r.value for r in read.selectExpr("CAST(value AS STRING) AS value").collect())
lap("read")

query = (spark.readStream.format("pylog").option("bootstrap.servers", bootstrap)
         .option("subscribe", source).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "10").load()
         .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.format("pylog").option("bootstrap.servers", bootstrap)
         .option("topic", copy).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination()
out["stream_batches"] = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
lap("stream")

@F.udf("string")
def imported_from(_):
    import sys
    import pylog_nb
    return f"{sys.executable} {pylog_nb.__file__}"

found = spark.range(8).repartition(4).select(imported_from("id").alias("where")).collect()
out["imported_from"] = sorted({r.where for r in found})
lap("udf")
deadline = time.monotonic() + 60  # both executors registered with the driver by now, or soon
while jvm_context.getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
    time.sleep(0.2)
out["executors"] = jvm_context.getExecutorMemoryStatus().size() - 1  # less the driver
shell.user_ns.update(rows=rows, bootstrap=bootstrap, source=source)
print("CELL-START", flush=True)
shell.run_cell('rows.write.format("pylog").option("bootstrap.servers", bootstrap)'
               '.option("topic", source).save()')
print("CELL-END", flush=True)
out["took_s"] = took
print("RESULT " + json.dumps(out), flush=True)
"""

CONNECT_DRIVER = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell

bootstrap, url, source, target = sys.argv[1:]
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "pylog_nb")
shell.run_line_magic("log_cluster", f"connect {bootstrap}")
out = {}
frame = shell.run_line_magic("log_spark", f"{source} --master {url}")
out["magic"] = sorted(r.value for r in frame.collect())
out["session"] = type(frame.sparkSession).__module__

from pyspark.sql import functions as F
from pylog_nb.spark import local_spark

spark = local_spark(master=url)  # the session %log_spark made
out["same_session"] = spark is frame.sparkSession
frame.selectExpr("key", "upper(value) AS value").write.format("pylog") \\
    .option("bootstrap.servers", bootstrap).option("topic", target).mode("append").save()
read = spark.read.format("pylog").option("bootstrap.servers", bootstrap) \\
    .option("subscribe", target).load().selectExpr("CAST(value AS STRING) AS value")
out["read"] = sorted(r.value for r in read.collect())

@F.udf("string")
def imported_from(_):
    import sys
    import pylog_nb
    return f"{sys.executable} {pylog_nb.__file__}"

found = spark.range(4).repartition(2).select(imported_from("id").alias("where")).collect()
out["imported_from"] = sorted({r.where for r in found})
shell.user_ns.update(frame=frame, bootstrap=bootstrap, target=target)
print("CELL-START", flush=True)
shell.run_cell('frame.write.format("pylog").option("bootstrap.servers", bootstrap)'
               '.option("topic", target).save()')
print("CELL-END", flush=True)
print("RESULT " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def workers_python(tmp_path_factory) -> str:
    """A virtualenv whose packages are this one's, pylog_nb left out (however installed)."""
    root = tmp_path_factory.mktemp("workers-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
                   check=True)
    deps = root / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(LEFT_OUT) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "deps.pth").write_text(f"{deps}\n")
    return str(python)


def _spark_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    return {**env, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_SCALA_VERSION": "2.13",  # what bin/load-spark-env.sh sets for executors
            **extra}


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_for_line(process: subprocess.Popen, log: Path, pattern: re.Pattern,
                   count: int = 1) -> list[str]:
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        found = pattern.findall(log.read_text(errors="replace"))
        if len(found) >= count:
            return found
        assert process.poll() is None, f"{log.name} exited:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern.pattern!r} in {log.name}:\n{log.read_text()[-3000:]}")


def _stop(processes: list[subprocess.Popen]) -> None:
    """Stop each process and what it started (executors, Python workers): each runs in its own
    session, so its process group holds them all."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for pid in _group(process.pid):  # executors and workers the root left behind
            os.kill(pid, signal.SIGKILL)


def _group(pgid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _java(main_class: str, *args: str) -> list[str]:
    return ["java", "-Xmx256m", "-cp", f"{SPARK_HOME / 'jars'}/*", main_class, *args]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[str]:
    """A standalone master and two one-core workers on 127.0.0.1; the master's URL."""
    logs = tmp_path_factory.mktemp("standalone")
    started = time.monotonic()
    processes = [_start(_java("org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                              "--port", "0", "--webui-port", "0"),
                        logs / "master.log", _spark_env())]
    try:
        url = _wait_for_line(processes[0], logs / "master.log", MASTER_URL)[0]
        for n in range(WORKERS):
            processes.append(_start(
                _java("org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK, "--port", "0",
                      "--webui-port", "0", "--cores", "1", "--memory", WORKER_MEMORY,
                      "--work-dir", str(logs / f"work-{n}"), url),
                logs / f"worker-{n}.log", _spark_env()))
        for n in range(WORKERS):
            _wait_for_line(processes[n + 1], logs / f"worker-{n}.log",
                           re.compile("Successfully registered with master"))
        print(f"standalone cluster started in {time.monotonic() - started:.1f} s")
        yield url
    finally:
        _stop(processes[::-1])


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory, workers_python) -> Iterator[str]:
    """A Spark Connect server (local[2]) on 127.0.0.1; its sc:// URL."""
    log = tmp_path_factory.mktemp("connect") / "connect.log"
    started = time.monotonic()
    # bin/spark-submit, as sbin/start-connect-server.sh: it adds the JVM options Arrow needs
    process = _start([str(SPARK_HOME / "bin" / "spark-submit"), "--class",
                      "org.apache.spark.sql.connect.service.SparkConnectServer",
                      "--master", "local[2]", "--driver-memory", "1g",
                      "--conf", f"spark.connect.grpc.binding.address={LOOPBACK}",
                      "--conf", "spark.connect.grpc.binding.port=0",
                      "--conf", f"spark.driver.host={LOOPBACK}",
                      "--conf", f"spark.driver.bindAddress={LOOPBACK}",
                      "--conf", "spark.ui.enabled=false",
                      "--conf", "spark.sql.shuffle.partitions=2"],
                     log, _spark_env(PYSPARK_PYTHON=workers_python))
    try:
        address = _wait_for_line(process, log, CONNECT_URL)[0]
        print(f"Spark Connect server started in {time.monotonic() - started:.1f} s")
        yield f"sc://{address}"
    finally:
        _stop([process])


def _drive(script: str, *args: str, **env: str) -> dict:
    """Run a driver in a fresh interpreter; what it printed as RESULT, and all it printed."""
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=DRIVER_WAIT_S, check=False,
                         env={**os.environ, "SPARK_LOCAL_IP": LOOPBACK, **env})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    result = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert result, run.stdout + run.stderr[-5000:]
    return {**json.loads(result[-1].removeprefix("RESULT ")), "stdout": run.stdout}


def _assert_shipped(imported_from: list[str], python: str) -> None:
    assert imported_from, "no executor answered"
    for where in imported_from:
        executable, module = where.split(" ", 1)
        assert executable == python, where
        assert re.search(r"/pylog_nb-[^/]*\.zip/pylog_nb/__init__\.py$", module), where


def _assert_one_line_save_mode_error(stdout: str) -> None:
    """What a notebook shows for ``.save()`` without a mode: one line, naming the fix."""
    cell = stdout.split("CELL-START\n", 1)[1].split("CELL-END", 1)[0]
    assert cell.strip().splitlines() == [
        'AnalysisException: the pylog sink only appends to topics: write with .mode("append") '
        "before .save()"], cell


def test_the_workers_python_has_the_dependencies_but_not_pylog_nb(workers_python):
    deps = subprocess.run([workers_python, "-c", "import pyspark, pyarrow, pandas, "
                           "confluent_kafka, kio"], capture_output=True, text=True, cwd="/")
    assert deps.returncode == 0, deps.stderr
    ours = subprocess.run([workers_python, "-c", "import pylog_nb"], capture_output=True,
                          text=True, cwd="/", env={k: v for k, v in os.environ.items()
                                                   if k != "PYTHONPATH"})
    assert "No module named 'pylog_nb'" in ours.stderr


def test_a_standalone_cluster_reads_writes_and_streams_with_the_package_shipped(
        cluster, standalone, workers_python, tmp_path):
    source, copy = (f"sa-{uuid.uuid4().hex[:8]}-{n}" for n in "ab")
    create_topic(cluster.bootstrap_servers, source, partitions=2)
    create_topic(cluster.bootstrap_servers, copy)
    out = _drive(STANDALONE_DRIVER, cluster.bootstrap_servers, standalone, source, copy,
                 str(tmp_path / "checkpoint"), PYSPARK_PYTHON=workers_python)
    assert out["master"] == standalone
    assert out["read"] == sorted(f"v{i}" for i in range(20))
    assert sum(out["stream_batches"]) == 20 and max(out["stream_batches"]) <= 10
    copied = read_to_end(cluster.bootstrap_servers, copy)
    assert sorted(m.value() for m in copied) == sorted(b"V%d" % i for i in range(20))
    assert out["executors"] == WORKERS
    _assert_shipped(out["imported_from"], workers_python)
    _assert_one_line_save_mode_error(out["stdout"])
    assert len(read_to_end(cluster.bootstrap_servers, source, partition=0)) + len(read_to_end(
        cluster.bootstrap_servers, source, partition=1)) == 20  # the failed save wrote none
    print(f"standalone driver: {out['took_s']}")


def test_spark_connect_reads_and_writes_and_a_save_without_mode_is_one_line(
        cluster, connect_server, workers_python):
    source, target = (f"sc-{uuid.uuid4().hex[:8]}-{n}" for n in "ab")
    produce(cluster.bootstrap_servers, source, [(b"k%d" % i, b"v%d" % i) for i in range(5)])
    out = _drive(CONNECT_DRIVER, cluster.bootstrap_servers, connect_server, source, target)
    assert out["session"].startswith("pyspark.sql.connect")
    assert out["same_session"] is True
    assert out["magic"] == [f"v{i}" for i in range(5)]
    assert out["read"] == [f"V{i}" for i in range(5)]
    _assert_shipped(out["imported_from"], workers_python)
    _assert_one_line_save_mode_error(out["stdout"])
    assert len(read_to_end(cluster.bootstrap_servers, target)) == 5  # the failed save wrote none
