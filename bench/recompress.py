"""What topic compression.type costs produce: a recompressing topic vs ``producer``.

Usage::

    .venv/bin/python bench/recompress.py [--records N] [--repeats R]

One fresh pylog-nb broker (as in bench.py); confluent-kafka sends N records of 100 B with lz4,
acks=1, batches up to 1 MB, into fresh one-partition topics whose compression.type is
``producer`` (kept as sent: the broker never decompresses), ``zstd`` and ``gzip`` (the leader
decompresses every lz4 batch and compresses it again) and ``uncompressed``. Records/s, median
of R, each repeat visiting the topics in the same order; the ratio to ``producer`` is printed
beside each.

On the 2-core lab machine (load average about 3 from other work, so the runs scatter), 10^6
records: producer 894,710 records/s; zstd 503,897 (0.56 x); gzip 323,730 (0.36 x);
uncompressed 600,674 (0.67 x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import create_topic, measure_produce, start_ours  # noqa: E402

DEFAULT_RECORDS = 200_000
DEFAULT_REPEATS = 3
TOPIC_CODECS = ("producer", "zstd", "gzip", "uncompressed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {codec: [] for codec in TOPIC_CODECS}
    with start_ours() as broker:
        for _ in range(args.repeats):
            for codec in TOPIC_CODECS:
                topic = create_topic(broker.bootstrap_servers, config={"compression.type": codec})
                elapsed_s = measure_produce(broker.bootstrap_servers, topic, args.records, acks="1")
                rates[codec].append(args.records / elapsed_s)
    base = statistics.median(rates["producer"])
    print(f"{args.records} records of 100 B, lz4 from the producer, acks=1, "
          f"median of {args.repeats}")
    for codec, values in rates.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:,.0f}" for v in values)
        print(f"  compression.type={codec:<13} {median:>10,.0f} records/s "
              f"({median / base:.2f} x producer; runs {runs})")


if __name__ == "__main__":
    main()
