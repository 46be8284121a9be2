"""The client benchmark's workload and its Site-to-Site side: the reference server it runs against
(an input port routed to an output port, in a subprocess), the FlowFiles it moves, and :class:`S2S`,
which sends and receives them with the package's client (HTTP or RAW) and times each transfer.

Owns: :func:`start_s2s_server`, :class:`S2S`, :func:`packet_bytes` and the workload constants
(``SMALL_ATTRS``, ``SMALL_CONTENT``, ``CHUNK``, the port names). Must not import: the other
``bench.client_*`` modules (they import this one), tests/.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pyspark_s2s.server.process import ServerSubprocess

__all__ = ["CHUNK", "IN_PORT", "OUT_PORT", "REPO", "S2S", "SMALL_ATTRS", "SMALL_CONTENT", "packet_bytes",
           "start_s2s_server"]

REPO = Path(__file__).resolve().parents[1]
SMALL_ATTRS = {"filename": "file-000001.txt", "path": "./", "mime.type": "text/plain"}
SMALL_CONTENT = bytes(range(100))
CHUNK = 64 << 10
IN_PORT = "bench-in"
OUT_PORT = "bench-out"


# -- subprocesses ------------------------------------------------------------------------------


def start_s2s_server(extra: list[str] | None = None) -> ServerSubprocess:
    return ServerSubprocess(
        ["--ttl", "120", "--input-port", IN_PORT, "--output-port", OUT_PORT, "--route", f"{IN_PORT}={OUT_PORT}",
         *(extra or [])],
        cwd=str(REPO),
    )  # started by ``with``


# -- Site-to-Site measurements ------------------------------------------------------------------


class S2S:
    """Client-side measurements against the reference server (input port routed to output port)."""

    def __init__(self, url: str, transport: str = "HTTP", peer: str | None = None) -> None:
        from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig

        #: "host:port": every transaction on this node (a cluster's FlowFiles stay on the node that
        #: took them); None: the client chooses by NiFi's weights
        self.peer = peer
        self.send_client: Any = SiteToSiteClient(SiteToSiteClientConfig(
            urls=url, port_name=IN_PORT, timeout=120, transport_protocol=transport))
        self.recv_client: Any = SiteToSiteClient(SiteToSiteClientConfig(
            urls=url, port_name=OUT_PORT, timeout=120, transport_protocol=transport))

    def close(self) -> None:
        self.send_client.close()
        self.recv_client.close()

    def send(self, n: int, attrs: dict[str, str], content: bytes) -> float:
        """One transaction of ``n`` FlowFiles; seconds from creation to commit."""
        t0 = time.perf_counter()
        tx = self.send_client.create_transaction("send", peer=self.peer)
        for _ in range(n):
            tx.send(content, attrs)
        tx.confirm()
        completion = tx.complete()
        secs = time.perf_counter() - t0
        if completion.flow_files != n:
            raise RuntimeError(f"sent {completion.flow_files} of {n}")
        return secs

    def receive(self, n: int, stream: bool = False) -> tuple[float, int]:
        """Receive until ``n`` FlowFiles arrived (as many transactions as the server makes);
        (seconds, packet bytes on the wire). ``stream``: read each content as it arrives
        (``receive(stream=True)`` and its chunks) instead of as one ``bytes`` per FlowFile."""
        from pyspark_s2s.protocol.codec import encode_packet_header

        got = 0
        secs = 0.0
        wire = 0
        for _ in range(10_000):
            if got >= n:
                break
            # packets are dropped as they arrive (as an application would); only their attributes
            # are kept to count the wire bytes afterwards, outside the timed section
            seen: list[dict[str, str]] = []
            content = 0
            t0 = time.perf_counter()
            tx = self.recv_client.create_transaction("receive", peer=self.peer)
            if stream:
                while (sp := tx.receive(stream=True)) is not None:
                    seen.append(sp.attributes)
                    for chunk in sp.chunks():
                        content += len(chunk)
            else:
                for p in tx:
                    seen.append(p.attributes)
                    content += len(p.content)
            tx.confirm()
            tx.complete()
            secs += time.perf_counter() - t0
            got += len(seen)
            wire += content + sum(len(encode_packet_header(a, 0)) for a in seen)
        if got != n:
            raise RuntimeError(f"received {got} of {n}")
        return secs, wire

    def receive_arrow(self, n: int) -> tuple[float, int]:
        """Receive ``n`` FlowFiles as Arrow record batches; (seconds, rows)."""
        got = 0
        secs = 0.0
        for _ in range(10_000):
            if got >= n:
                break
            t0 = time.perf_counter()
            tx = self.recv_client.create_transaction("receive")
            while True:
                batch = tx.receive_record_batch()
                if batch is None:
                    break
                got += batch.num_rows
            tx.confirm()
            tx.complete()
            secs += time.perf_counter() - t0
        if got != n:
            raise RuntimeError(f"received {got} of {n} as Arrow")
        return secs, got


def packet_bytes(n: int, attrs: dict[str, str], content: bytes) -> int:
    from pyspark_s2s.protocol.codec import encode_packet_header

    return n * (len(encode_packet_header(attrs, len(content))) + len(content))
