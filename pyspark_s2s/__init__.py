"""pyspark-s2s: Apache NiFi Site-to-Site over HTTP(S) for Python and PySpark.

This module must stay cheap and unable to fail on import: Spark imports every installed
top-level module named ``pyspark_*`` at start-up, and one that raises disables the
auto-registration of every Python data source on the machine. So nothing heavy is
imported here; public names are resolved lazily on first attribute access.
"""

from __future__ import annotations

import logging
from typing import Any

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

_LAZY = {
    "SiteToSiteClient": ("pyspark_s2s.client", "SiteToSiteClient"),
    "SiteToSiteClientConfig": ("pyspark_s2s.client", "SiteToSiteClientConfig"),
    "DataPacket": ("pyspark_s2s.protocol.codec", "DataPacket"),
}

__all__ = ["DataPacket", "SiteToSiteClient", "SiteToSiteClientConfig", "__version__"]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'pyspark_s2s' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value
