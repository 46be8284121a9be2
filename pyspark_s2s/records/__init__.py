"""Record sets <-> Arrow: NiFi's record-oriented FlowFile content (Avro, JSON, CSV, Parquet).

Owns: turning one FlowFile's record set into Arrow record batches (``records.read``) and Arrow
record batches into record-set content as NiFi's RecordSetWriters write it (``records.write``),
through well-kept libraries, columnar end to end.

Must not import: pyspark (the client and the CLI use this package too), the server.
"""

from __future__ import annotations

#: the record formats, as the ``recordFormat`` option spells them
RECORD_FORMATS = ("avro", "json", "csv", "parquet")

__all__ = ["RECORD_FORMATS"]
