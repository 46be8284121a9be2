"""URL paths of every Site-to-Site endpoint, relative to the API base (``.../nifi-api``).

Owns: the path layout of docs/protocol.md §1 (identical in NiFi 1.x and 2.x), for building
(client) and matching (server).

Must not import: anything outside the standard library except ``pyspark_s2s.protocol``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from pyspark_s2s.protocol.codes import Direction

__all__ = [
    "API_SUFFIX",
    "DataTransferPath",
    "flow_files_path",
    "match_data_transfer_path",
    "peers_path",
    "site_info_path",
    "transaction_path",
    "transactions_path",
]

API_SUFFIX = "/nifi-api"


def site_info_path() -> str:
    return "/site-to-site"


def peers_path() -> str:
    return "/site-to-site/peers"


def _seg(value: str) -> str:
    return quote(value, safe="")


def transactions_path(direction: Direction, port_id: str) -> str:
    return f"/data-transfer/{direction.port_type}/{_seg(port_id)}/transactions"


def transaction_path(direction: Direction, port_id: str, transaction_id: str) -> str:
    return f"{transactions_path(direction, port_id)}/{_seg(transaction_id)}"


def flow_files_path(direction: Direction, port_id: str, transaction_id: str) -> str:
    return f"{transaction_path(direction, port_id, transaction_id)}/flow-files"


@dataclass(frozen=True, slots=True)
class DataTransferPath:
    """A parsed ``/data-transfer/...`` path. ``port_type`` is kept raw: NiFi answers 404 JSON
    for a type that is neither input-ports nor output-ports, after matching the route."""

    port_type: str
    port_id: str
    transaction_id: str | None
    flow_files: bool

    @property
    def direction(self) -> Direction | None:
        try:
            return Direction.from_port_type(self.port_type)
        except ValueError:
            return None


_DATA_TRANSFER = re.compile(
    r"^/data-transfer/(?P<type>[^/]+)/(?P<port>[^/]+)/transactions"
    r"(?:/(?P<tx>[^/]+)(?P<ff>/flow-files)?)?/?$"
)


def match_data_transfer_path(path: str) -> DataTransferPath | None:
    """Parse a path relative to the API base; None when it is not a data-transfer path."""
    from urllib.parse import unquote

    m = _DATA_TRANSFER.match(path)
    if m is None:
        return None
    tx = m.group("tx")
    return DataTransferPath(
        port_type=unquote(m.group("type")),
        port_id=unquote(m.group("port")),
        transaction_id=unquote(tx) if tx is not None else None,
        flow_files=m.group("ff") is not None,
    )
