"""Local clusters of broker processes: lifecycle, ports, data directories, faults."""

from .local import ClusterError, LocalCluster

__all__ = ["ClusterError", "LocalCluster"]
