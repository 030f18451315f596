"""Micro-benchmark: encoding one Produce response, kio's generic path vs the hand-written one.

Usage::

    .venv/bin/python bench/produce_response.py [--partitions 6] [--rounds 21] [--calls 2000]

The body is what the small-batch workload answers (bench/bench.py --workload small): one topic,
``--partitions`` partitions each appended at acks=1, shaped as the replica manager shapes it.
For each version librdkafka or the Java client may send (v7-v10) it times ``--calls`` encodes,
``--rounds`` times, and prints the median microseconds per response of each path and their
ratio. "kio" is ``codec.encode_entity`` with kio's schema (what ``codec.encode_response`` did for
Produce before), "hand" is ``produce_response.encode_produce_response``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

from pylog_nb.broker.protocol.codec import RequestHeader, encode_entity, load_response_schema
from pylog_nb.broker.protocol.produce_response import encode_produce_response
from pylog_nb.broker.protocol.versions import PRODUCE_KEY

VERSIONS = (7, 8, 9, 10)
NS_PER_US = 1_000


def response_body(partitions: int) -> dict:
    return {"responses": [{"name": "small-bench-topic", "partition_responses": [
        {"index": i, "base_offset": 123_456 + i, "log_start_offset": 0, "error_code": 0,
         "log_append_time": -1} for i in range(partitions)]}]}


def median_us(encode: Callable[[], object], rounds: int, calls: int) -> float:
    samples = []
    for _ in range(calls):  # warm up
        encode()
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            encode()
        samples.append((time.perf_counter_ns() - start) / calls / NS_PER_US)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    body = response_body(args.partitions)
    print(f"Produce response, 1 topic x {args.partitions} partitions, median of {args.rounds} "
          f"rounds of {args.calls} encodes (us per response)")
    print("| version | kio | hand | kio/hand |")
    print("|---|---|---|---|")
    for version in VERSIONS:
        header = RequestHeader(PRODUCE_KEY, version, 1, "bench")
        schema = load_response_schema(PRODUCE_KEY, version)
        assert bytes(encode_entity(header, schema, body)) == encode_produce_response(
            1, version, body)
        kio = median_us(partial(encode_entity, header, schema, body), args.rounds, args.calls)
        hand = median_us(partial(encode_produce_response, 1, version, body),
                         args.rounds, args.calls)
        print(f"| v{version} | {kio:.1f} | {hand:.2f} | {kio / hand:.0f}x |")


if __name__ == "__main__":
    main()
