"""The reference NiFi Site-to-Site (HTTP) server: ``s2s serve`` / ``python -m pyspark_s2s.server``.

Owns: ``model`` (the cluster: nodes, ports, queues; with ``transactions``, its transaction
table, and ``routing``, its load-balanced routes), ``core`` and ``transfer`` (the Site-to-Site
rules and data movement both transports share), ``http`` (listener and connection; with
``httpbase``, ``httproutes`` and ``httptransfer``, the endpoints), ``raw`` (the RAW listener),
``app`` (listeners, TTL cleanup), ``admin`` (the JSON admin API), ``tls`` (key material,
policies), ``faults`` (fault injection), ``persist`` (``--data-dir`` journal and snapshots),
``cli`` (the command). See docs/server.md ("How the server is divided").

Must not import: ``pyspark_s2s.client`` (the client must never share code paths with the server
it is tested against, beyond the protocol core) or any third-party package at import time.
"""

from __future__ import annotations

__all__: list[str] = []
