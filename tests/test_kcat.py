"""Debian's kcat 1.7.1 (librdkafka 2.0.2, picky about advertised version ranges)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support.clients import consume_all, create_topic, kcat_args

KCAT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat")
    assert path, "kcat is not installed: .ci/run installs it with apt-get install kcat"
    return path


def _run(kcat: str, *args: str, stdin: bytes = b"") -> str:
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True,
                          timeout=KCAT_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_kcat_lists_metadata(kcat, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=3)
    out = _run(kcat, *kcat_args(bootstrap), "-L", "-t", topic_name)
    assert f'topic "{topic_name}" with 3 partitions' in out
    assert "leader 1" in out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_then_consume(kcat, bootstrap, topic_name, codec):
    lines = [f"key{i}:line {i}" for i in range(200)]
    _run(kcat, *kcat_args(bootstrap), "-P", "-t", topic_name, "-K:", "-z", codec,
         stdin=("\n".join(lines) + "\n").encode())
    out = _run(kcat, *kcat_args(bootstrap), "-C", "-t", topic_name, "-e", "-f", "%k:%s@%o\n")
    assert out.splitlines() == [f"{line}@{i}" for i, line in enumerate(lines)]
    received = consume_all(bootstrap, topic_name, 200)
    assert received[199].key() == b"key199"
