"""Micro-benchmark: encoding one Produce response, kio's generic path vs the hand-written one.

Usage::

    .venv/bin/python bench/produce_response.py [--partitions 1 6] [--rounds 21] [--calls 2000]

The body is what the small-batch workload answers (bench/bench.py --workload small): one topic,
``--partitions`` partitions each appended at acks=1, shaped as the replica manager shapes it.
In that workload librdkafka 2.16 sends Produce v10 with one partition per request (as many
requests as batches were appended), so its responses are the one-partition rows.
For each version librdkafka or the Java client may send (v7-v10) it times ``--calls`` encodes,
``--rounds`` times, the two paths alternating so both see the same load, and prints the median
(and minimum) microseconds per response of each path and the median of the rounds' ratios.
"kio" is ``codec.encode_entity`` with kio's schema (what ``codec.encode_response`` did for
Produce before), "hand" is ``produce_response.encode_produce_response``.
"""

from __future__ import annotations

import argparse
import itertools
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


def round_us(encode: Callable[[], object], calls: int) -> float:
    """Microseconds per call over ``calls`` calls."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        encode()
    return (time.perf_counter_ns() - start) / calls / NS_PER_US


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 6])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    print(f"Produce response encoding, {args.rounds} rounds of {args.calls} encodes per path, "
          "the paths alternating (us per response)")
    print("| partitions | version | kio median | hand median | kio/hand (median of rounds) "
          "| kio min | hand min |")
    print("|---|---|---|---|---|---|---|")
    for partitions, version in itertools.product(args.partitions, VERSIONS):
        body = response_body(partitions)
        header = RequestHeader(PRODUCE_KEY, version, 1, "bench")
        schema = load_response_schema(PRODUCE_KEY, version)
        kio = partial(encode_entity, header, schema, body)
        hand = partial(encode_produce_response, 1, version, body)
        assert bytes(kio()) == hand()
        round_us(kio, args.calls), round_us(hand, args.calls)  # warm up
        rounds = [(round_us(kio, args.calls), round_us(hand, args.calls))
                  for _ in range(args.rounds)]
        kio_us, hand_us = [statistics.median(column) for column in zip(*rounds, strict=True)]
        ratio = statistics.median(k / h for k, h in rounds)
        print(f"| {partitions} | v{version} | {kio_us:.1f} | {hand_us:.2f} | {ratio:.0f}x "
              f"| {min(k for k, _ in rounds):.1f} | {min(h for _, h in rounds):.2f} |")


if __name__ == "__main__":
    main()
