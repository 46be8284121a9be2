"""The PySpark data source ``nifi-s2s`` (Python Data Source API, pyspark >= 4.0).

Owns: :class:`DefaultSource` (found by Spark's auto-registration through
``pyspark_s2s.DefaultSource``; :func:`register` it by hand for ``--py-files`` zips), the stream and batch
readers (``spark.source``; their exactly-once rounds: ``spark.rounds``), the writers
(``spark.sink``), the options (``spark.options``), the schema (``spark.schema``), the staging
area (``spark.staging``) and :func:`read_record_files` (``recordDelivery=files``: record FlowFiles
read by Spark's own file readers, ``spark.files``). :func:`register` lives in ``spark.datasource``, next to the class it
registers.

This is the only package that imports pyspark. It is built on the client
(:class:`~pyspark_s2s.client.SiteToSiteClient`); it never speaks HTTP itself.
"""

from __future__ import annotations

from pyspark_s2s.spark.datasource import DefaultSource, register
from pyspark_s2s.spark.files import read_record_files
from pyspark_s2s.spark.options import SPARK_OPTIONS, SparkOptions
from pyspark_s2s.spark.schema import FILES_SCHEMA, SOURCE_SCHEMA

__all__ = ["FILES_SCHEMA", "SOURCE_SCHEMA", "SPARK_OPTIONS", "DefaultSource", "SparkOptions", "read_record_files",
           "register"]
