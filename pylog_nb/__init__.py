"""pylog-nb: a real, Kafka-compatible, replicated log cluster inside a Jupyter notebook."""

from .cluster import ClusterError, LocalCluster

__all__ = ["ClusterError", "LocalCluster", "load_ipython_extension"]
__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:
    """``%load_ext pylog_nb``: register the ``%log_*`` magics (IPython is imported only now)."""
    from .magics import load_ipython_extension as load

    load(ipython)
