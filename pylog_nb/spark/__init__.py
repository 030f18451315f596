"""Topics as Spark DataFrames.

>>> spark = local_spark()                       # loopback only, workers on this interpreter
>>> spark = local_spark(master="spark://h:7077")  # a standalone cluster: pylog_nb shipped to it
>>> spark = local_spark(master="sc://h:15002")    # Spark Connect (spark_session is the same)
>>> df = to_spark(cluster, "orders")            # or a bootstrap string for a real Kafka
>>> spark.read.format("pylog").option("bootstrap.servers", b).option("subscribe", "t").load()

PySpark is imported only when this package is: the rest of pylog_nb works without it.
"""

from .options import SparkSourceError
from .session import local_spark, package_zip, spark_log_path, spark_session, to_spark
from .source import SHORT_NAME, PylogDataSource

__all__ = ["SHORT_NAME", "PylogDataSource", "SparkSourceError", "local_spark", "package_zip",
           "spark_log_path", "spark_session", "to_spark"]
