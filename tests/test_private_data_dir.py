"""A cluster's data directory is its owner's alone (issue 23): what a LocalCluster and its nodes
create is 0700 (directories) and 0600 (files), whatever the caller's umask, so another account
on a shared machine cannot read its records or its state."""

from __future__ import annotations

import os
import stat

from support.clients import produce

from pylog_nb import LocalCluster
from pylog_nb.client.io import create_topic, delete_topic

OPEN_UMASK = 0o022  # the usual default: 755 directories and 644 files


def test_every_file_and_directory_a_cluster_creates_is_private(tmp_path):
    data_dir = tmp_path / "lab" / "cluster"
    before = os.umask(OPEN_UMASK)
    try:
        with LocalCluster(brokers=3, data_dir=data_dir) as cluster:
            create_topic(cluster.bootstrap_servers, "secrets", partitions=2,
                         replication_factor=3)
            produce(cluster.bootstrap_servers, "secrets", [(b"k", b"v")] * 10)
            create_topic(cluster.bootstrap_servers, "gone", partitions=1)
            delete_topic(cluster.bootstrap_servers, "gone")
            cluster.restart(1)  # a restarted node's files too
    finally:
        os.umask(before)
    found = [data_dir, *data_dir.rglob("*")]
    assert len(found) > 20, [str(p) for p in found]  # logs, segments, indexes, the metadata log
    open_to_others = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode))
                      for p in found if stat.S_IMODE(p.stat().st_mode) & 0o077}
    assert not open_to_others, f"readable by others: {open_to_others}"
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / "cluster.json").stat().st_mode) == 0o600
