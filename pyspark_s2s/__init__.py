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

__all__ = ["DataPacket", "DefaultSource", "SiteToSiteClient", "SiteToSiteClientConfig", "__version__"]


def _default_source() -> Any:
    # Spark's data source lookup does ``hasattr(module, "DefaultSource")`` on every installed
    # ``pyspark_*`` module and lets any other exception escape, which would disable every
    # Python data source on the machine: so a failing import becomes an AttributeError here.
    try:
        from pyspark_s2s.spark.datasource import DefaultSource
    except Exception as exc:  # re-raised as the one type hasattr() handles
        logging.getLogger(__name__).warning("nifi-s2s data source unavailable: %s", exc)
        raise AttributeError(f"pyspark_s2s.DefaultSource is unavailable: {exc}") from exc
    return DefaultSource


def __getattr__(name: str) -> Any:
    if name == "DefaultSource":
        value = _default_source()
        globals()[name] = value
        return value
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'pyspark_s2s' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value
