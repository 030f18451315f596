"""Live notebook widgets over a LocalCluster (anywidget; everything from clients drawn as text)."""

from .browser import MessageBrowser
from .cluster_view import ClusterView
from .history import SnapshotHistory
from .snapshot import take_snapshot

__all__ = ["ClusterView", "MessageBrowser", "SnapshotHistory", "take_snapshot"]
