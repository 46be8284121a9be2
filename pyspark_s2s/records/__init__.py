"""Record sets <-> Arrow: NiFi's record-oriented FlowFile content (Avro, JSON, CSV, Parquet).

Owns: turning one FlowFile's record set into Arrow record batches (``records.read``; many small
ones in one parse: ``records.grouped``) and Arrow record batches into record-set content as NiFi's
RecordSetWriters write it (``records.write``; the types each format holds and the Avro schema:
``records.types``), through well-kept libraries (pyarrow, polars), columnar end to end. Submodules import pyarrow (and polars) themselves; this
module imports nothing.

Must not import: pyspark (the client and the CLI use this package too), the server.
"""

from __future__ import annotations

#: the record formats, as the ``recordFormat`` option spells them
RECORD_FORMATS = ("avro", "json", "csv", "parquet")

__all__ = ["RECORD_FORMATS"]
