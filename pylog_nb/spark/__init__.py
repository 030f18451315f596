"""Topics as Spark DataFrames.

>>> spark = local_spark()                       # loopback only, workers on this interpreter
>>> df = to_spark(cluster, "orders")            # or a bootstrap string for a real Kafka
>>> spark.read.format("pylog").option("bootstrap.servers", b).option("subscribe", "t").load()

PySpark is imported only when this package is: the rest of pylog_nb works without it.
"""

from .options import SparkSourceError
from .session import local_spark, spark_log_path, to_spark
from .source import SHORT_NAME, PylogDataSource

__all__ = ["SHORT_NAME", "PylogDataSource", "SparkSourceError", "local_spark", "spark_log_path",
           "to_spark"]
