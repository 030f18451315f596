"""pylog-nb: a real, Kafka-compatible, replicated log cluster inside a Jupyter notebook."""

from .cluster import ClusterError, LocalCluster

__all__ = ["ClusterError", "LocalCluster"]
__version__ = "0.1.0"
