"""Live notebook widgets over a LocalCluster (ipywidgets; rendering escapes every value)."""

from .cluster_view import ClusterView
from .snapshot import take_snapshot

__all__ = ["ClusterView", "take_snapshot"]
