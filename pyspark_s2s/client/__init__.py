"""NiFi Site-to-Site client over HTTP(S): ``SiteToSiteClient`` and its transactions.

Owns: the public client API (re-exported here). See ``docs/client.md``.

Must not import: the server, the Spark layer. ``pyarrow`` is imported only when Arrow record
batches are requested.
"""

from __future__ import annotations

from pyspark_s2s.client.client import SiteToSiteClient
from pyspark_s2s.client.config import (
    OPTIONS,
    Option,
    Secret,
    SiteToSiteClientConfig,
)
from pyspark_s2s.client.docgen import options_markdown
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.client.receiving import StreamedPacket
from pyspark_s2s.client.siteinfo import PortInfo, SiteInfo
from pyspark_s2s.client.transaction import TransactionCompletion, TransactionHandle
from pyspark_s2s.protocol.codec import DataPacket
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.peers import PeerStatus

__all__ = [
    "OPTIONS",
    "DataPacket",
    "Direction",
    "Option",
    "PeerStatus",
    "PortInfo",
    "ReceiveTransaction",
    "Secret",
    "SendTransaction",
    "SiteInfo",
    "SiteToSiteClient",
    "SiteToSiteClientConfig",
    "StreamedPacket",
    "TransactionCompletion",
    "TransactionHandle",
    "options_markdown",
]
