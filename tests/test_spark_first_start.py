"""``to_spark`` and ``%log_spark`` fail in the call that made the mistake, before Spark starts, and
the first start of Spark says what it waits for before it waits; the JVM's log goes when the
interpreter exits.

The first start is tested in a fresh interpreter: in this one, another test may have started
Spark already.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.clients import produce

pyspark = pytest.importorskip("pyspark")

from pylog_nb.spark import SparkSourceError, to_spark  # noqa: E402 (after the skip)

FIRST_START_WAIT_S = 300  # the JVM's first start takes 15-30 s on a loaded two-core machine
SHELL_SCRIPT = """
import sys
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

bootstrap, topic = sys.argv[1:]
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "pylog_nb")
shell.run_line_magic("log_cluster", f"connect {bootstrap}")
try:
    shell.run_line_magic("log_spark", f"{topic} --to 0:99")
except UsageError as error:
    print(f"error: {error}")
print(f"rows: {shell.run_line_magic('log_spark', topic).count()}")

import pyspark
from pylog_nb.spark import spark_log_path
print(f"jvm: {pyspark.SparkContext._gateway.proc.pid} log: {spark_log_path()} "
      f"{spark_log_path().exists()}")
"""


def test_to_spark_refuses_offsets_past_the_end_before_spark_starts(bootstrap, topic_name):
    gateway = pyspark.SparkContext._gateway  # None unless another test started Spark already
    produce(bootstrap, topic_name, [(None, b"a"), (None, b"b")])
    with pytest.raises(SparkSourceError) as caught:
        to_spark(bootstrap, topic_name, ending={0: 99})
    assert str(caught.value) == (f"ending offset 99 of {topic_name}-0 is past its end: its high "
                                 "watermark is 2")
    with pytest.raises(SparkSourceError, match=rf"^starting offset 5 of {topic_name}-0 is past"):
        to_spark(bootstrap, topic_name, starting={0: 5})
    with pytest.raises(SparkSourceError, match=rf"^topic {topic_name}-nope does not exist$"):
        to_spark(bootstrap, f"{topic_name}-nope")
    assert pyspark.SparkContext._gateway is gateway


def test_the_first_spark_start_says_what_it_waits_for_before_it_waits(bootstrap, topic_name):
    produce(bootstrap, topic_name, [(None, b"a"), (None, b"b")])
    run = subprocess.run([sys.executable, "-c", SHELL_SCRIPT, bootstrap, topic_name],
                         capture_output=True, text=True, timeout=FIRST_START_WAIT_S, check=False)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    expected = [f"error: ending offset 99 of {topic_name}-0 is past its end: its high watermark "
                "is 2",  # refused at once: a doomed read starts no Spark
                "starting Spark (about 15 s)…", "Spark started in", "rows: 2"]
    found = [next((i for i, text in enumerate(lines) if text.startswith(want)), None)
             for want in expected]
    assert None not in found and found == sorted(found), run.stdout
    assert "WARN" not in run.stdout + run.stderr, run.stderr
    _, jvm_pid, _, log, existed = lines[-1].split()
    assert existed == "True", lines[-1]
    assert not Path(log).exists(), f"{log} outlived the interpreter"
    assert not Path(f"/proc/{jvm_pid}").exists(), "the JVM outlived the interpreter"
