"""Topics as Spark DataFrames.

>>> spark = local_spark()                       # loopback only, workers on this interpreter
>>> spark = local_spark(master="spark://h:7077")  # a standalone cluster: pylog_nb shipped to it
>>> spark = local_spark(master="sc://h:15002")    # Spark Connect (spark_session is the same)
>>> df = to_spark(cluster, "orders")            # or a bootstrap string for a real Kafka
>>> spark.read.format("pylog").option("bootstrap.servers", b).option("subscribe", "t").load()

PySpark is imported only when one of these names is: the rest of pylog_nb works without it.
Each is imported on first use, so Spark's Python workers import ``source`` and what it needs
only (``pylog_nb.lazy``).
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_MODULES = {
    ".options": ("SparkSourceError",),
    ".session": ("local_spark", "package_zip", "spark_log_path", "spark_session", "to_spark"),
    ".source": ("SHORT_NAME", "PylogDataSource"),
}
__all__ = sorted(name for names in _MODULES.values() for name in names)
__getattr__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:
    from .options import SparkSourceError
    from .session import local_spark, package_zip, spark_log_path, spark_session, to_spark
    from .source import SHORT_NAME, PylogDataSource
