"""The data-transfer endpoints of the reference server's HTTP adapter (docs/protocol.md §1.3-1.8).

Owns: :class:`TransferEndpoints`, the request handlers of ``/data-transfer``: creating a
transaction (its ``Location``), extending its TTL, the upload (a request body streamed into the
core's upload, in bounded reads), the download (a chunked answer of the core's batches), the
``DELETE`` that confirms, cancels or reports a bad checksum, and the injected faults that act inside
them (drop mid-body, stall, corrupt checksum). Every decision about ports, transactions and queues
is :mod:`pyspark_s2s.server.core`'s and :mod:`pyspark_s2s.server.transfer`'s; this module turns
headers and bodies into their calls and their answers into status codes, headers and bodies.

Must not import: ``pyspark_s2s.client``, third-party packages, :mod:`pyspark_s2s.server.raw`, the
modules built on this one (:mod:`~pyspark_s2s.server.httproutes`, :mod:`~pyspark_s2s.server.http`).
"""

from __future__ import annotations

import time

from pyspark_s2s.errors import (
    ChecksumMismatch,
    ProtocolError,
    TransactionNotFoundError,
    TransactionStateError,
)
from pyspark_s2s.protocol.codes import (
    Direction,
    Header,
    ResponseCode,
    TransactionResult,
)
from pyspark_s2s.protocol.endpoints import API_SUFFIX, transaction_path
from pyspark_s2s.protocol.negotiation import (
    HandshakeProperties,
    get_header,
    negotiate_transport_version,
    parse_handshake_headers,
)
from pyspark_s2s.protocol.stream import PacketStreamEncoder
from pyspark_s2s.server import core, transfer
from pyspark_s2s.server.faults import checksum_as_sent
from pyspark_s2s.server.httpbase import NO_CACHE, HandlerBase
from pyspark_s2s.server.httpio import READ_SIZE, UPLOAD_READ_SIZE, ChunkedWriter
from pyspark_s2s.server.model import Port, Transaction

__all__ = ["Dropped", "TransferEndpoints"]


class Dropped(Exception):
    """Internal control flow: the connection was dropped on purpose (fault) or by the peer."""


class TransferEndpoints(HandlerBase):
    """The ``/data-transfer`` handlers of one connection (a base of
    :class:`~pyspark_s2s.server.http.S2SHandler`; :class:`~pyspark_s2s.server.httproutes.SiteToSiteRoutes`
    routes requests to them)."""

    def _transfer_denied(self) -> bool:
        return self.framework_denied("Unable to transfer data via site-to-site.") or self.http_disabled()

    def _handshake(self, direction: Direction, port_id: str) -> tuple[Port, HandshakeProperties]:
        """NiFi's handshake (§8): compression flag, then the port checks (core.check_handshake),
        then the numeric properties."""
        props: HandshakeProperties | None = None
        deferred: ProtocolError | None = None
        try:
            props = parse_handshake_headers(self.headers)
        except ProtocolError as exc:
            if exc.option == Header.USE_COMPRESSION:
                raise
            deferred = exc
        port = core.check_handshake(self.app, self.requester(), port_id, direction, deferred)
        assert props is not None
        return port, props

    def _transaction(self, direction: Direction, port_id: str, tx_id: str) -> Transaction:
        return core.find_transaction(self.app, self.requester(), direction, port_id, tx_id)

    def _create_transaction(self, port_type: str, port_id: str) -> None:
        try:
            direction = Direction.from_port_type(port_type)
        except ValueError:
            self.send_result(404, TransactionResult(0, ResponseCode.ABORT, "Port was not found."))
            return
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        port, props = self._handshake(direction, port_id)
        tx = core.create_transaction(self.app, self.requester(), port, props)
        location = (
            self.request_base_url() + API_SUFFIX + transaction_path(direction, port_id, tx.id)
        )
        headers = self.common_headers(version)
        headers[Header.LOCATION_INTENT] = Header.LOCATION_INTENT_VALUE
        headers[Header.LOCATION] = location
        self.send_result(
            201,
            TransactionResult(
                0,
                ResponseCode.PROPERTIES_OK,
                "Handshake properties are valid, and port is running. A transaction is created:"
                + tx.id,
            ),
            headers,
        )

    def _extend(self, port_type: str, port_id: str, tx_id: str) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        try:
            direction = Direction.from_port_type(port_type)
        except ValueError:
            self.app.cluster.active_transaction(self.node, tx_id)
            self.send_result(404, TransactionResult(0, ResponseCode.ABORT, "Port was not found."))
            return
        tx = self._transaction(direction, port_id, tx_id)
        if not tx.held:
            self._handshake(direction, port_id)
        self.app.cluster.extend(tx)
        self.send_result(
            200,
            TransactionResult(0, ResponseCode.CONTINUE_TRANSACTION, "Extended TTL."),
            self.common_headers(version),
        )

    def _upload(self, port_id: str, tx_id: str) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        tx = self._transaction(Direction.SEND, port_id, tx_id)
        core.ready_for_transfer(tx)
        _port, props = self._handshake(Direction.SEND, port_id)
        fault = self.fault
        # plain uploads without an injected fault take whole small packets in bulk runs, kept
        # in wire form (model.wire_flowfiles); the rest goes event by event
        upload = transfer.StreamUpload(self.app, tx, self.requester(), props, bulk=fault is None)
        stalled = False
        try:
            while True:
                if fault is not None and fault.kind == "drop_mid_body" and self.body.received >= fault.after_bytes:
                    raise Dropped()
                # small packets: large reads, decoded in bulk; large content: the 64 KiB pieces it
                # is kept in (reused heap memory, where 256 KiB pieces each took fresh pages)
                size = READ_SIZE if upload.in_content else UPLOAD_READ_SIZE
                data = self.body.read(size if fault is None else min(READ_SIZE, 1024))
                if not data:
                    break
                upload.feed(data)
                if (
                    fault is not None
                    and fault.kind == "stall"
                    and not stalled
                    and len(upload.received) >= fault.after_packets
                ):
                    stalled = True
                    time.sleep(fault.seconds)
            checksum = upload.end()
        except core.NoFlowFilesSent as exc:
            self.send_text(400, exc.message)
            return
        except ProtocolError as exc:
            upload.fail(str(exc.message))
            self.close_connection = not self.body.done
            raise
        except TransactionNotFoundError:
            raise
        except BaseException as exc:
            upload.fail("upload stalled" if isinstance(exc, TimeoutError) else "upload connection broke")
            self.close_connection = True
            raise
        answer = checksum_as_sent(checksum, fault)
        self.send_bytes(
            202, str(answer).encode("ascii"), "text/plain", self.common_headers(version)
        )

    def _download(self, port_id: str, tx_id: str) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        tx = self._transaction(Direction.RECEIVE, port_id, tx_id)
        core.ready_for_transfer(tx)
        port, props = self._handshake(Direction.RECEIVE, port_id)
        fault = self.fault
        # FlowFiles are taken in batches (one lock, one write per run of wire-form packets); one
        # at a time while a fault counts packets
        download = transfer.Download(self.app, tx, port, props, one_at_a_time=fault is not None)
        if not download.start():
            # NiFi aborts the streaming answer with WebApplicationException(200): text body,
            # no common headers (docs/protocol.md §1.6)
            self.send_text(200, "HTTP 200 OK")
            return
        encoder = PacketStreamEncoder(props.compress)
        try:
            headers = self.common_headers(version)
            headers["Transfer-Encoding"] = "chunked"
            self._start(202, "application/octet-stream", headers)
            self.end_headers()
            out = ChunkedWriter(self.wfile, self.connection)
            batch = download.next_batch()
            while batch:
                transfer.write_flowfiles(out, encoder, batch)
                if fault is not None and encoder.packets == fault.after_packets:
                    if fault.kind == "drop_mid_body":
                        out.flush()
                        raise Dropped()
                    if fault.kind == "stall":
                        out.flush()
                        time.sleep(fault.seconds)
                batch = download.next_batch()
            out.flush()  # every packet is out; only the end of the body is not
        except BaseException:
            download.fail("download connection broke")
            self.close_connection = True
            raise
        checksum = checksum_as_sent(encoder.checksum, fault)
        # hold the transaction before the body ends: a client sends its commit the moment it
        # reads the last chunk (NiFi holds it inside the streaming write, too); held after the
        # end, that commit could find the transaction still TRANSFERRING and get a 500
        download.finish(checksum)
        try:
            out.close()
        except BaseException:
            download.fail_if_held("download connection broke")  # the client cannot have read the end
            self.close_connection = True
            raise

    def _commit(
        self, direction: Direction, port_id: str, tx_id: str, query: dict[str, list[str]]
    ) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        tx = self._transaction(direction, port_id, tx_id)
        if not tx.held:
            self._handshake(direction, port_id)
        raw = (query.get("responseCode") or [""])[0]
        allowed = (
            (ResponseCode.CONFIRM_TRANSACTION, ResponseCode.CANCEL_TRANSACTION)
            if direction is Direction.RECEIVE
            else (
                ResponseCode.BAD_CHECKSUM,
                ResponseCode.CONFIRM_TRANSACTION,
                ResponseCode.CANCEL_TRANSACTION,
            )
        )
        code: int | None = None
        if raw == "":
            message = "responseCode is required."
        else:
            try:
                code = int(raw)
            except ValueError:
                code = None
            message = "" if code in allowed else f"responseCode {raw} is invalid. "
        if message:
            self.send_result(400, TransactionResult(0, ResponseCode.ABORT, message))
            return
        cluster = self.app.cluster
        if code == ResponseCode.CANCEL_TRANSACTION:
            cluster.cancel(tx)
            self.send_result(
                200,
                TransactionResult(0, ResponseCode.CANCEL_TRANSACTION, "Transaction has been canceled."),
            )
            return
        if not tx.held:
            raise TransactionStateError(
                f"Transaction {tx.id} is {tx.state.name}; nothing to commit.", transaction=tx.id
            )
        if direction is Direction.RECEIVE:
            try:
                count = core.confirm_receive(self.app, tx, (query.get("checksum") or [""])[0])
            except ChecksumMismatch as exc:
                self.send_result(
                    400,
                    TransactionResult(0, ResponseCode.BAD_CHECKSUM, exc.message),
                    {"Cache-Control": NO_CACHE},
                )
                return
            self.send_result(
                200,
                TransactionResult(count, ResponseCode.CONFIRM_TRANSACTION),
                self.common_headers(version),
            )
            return
        if code == ResponseCode.BAD_CHECKSUM:
            cluster.bad_checksum(tx)
            self.send_result(
                200,
                TransactionResult(0, ResponseCode.CANCEL_TRANSACTION),
                {"Cache-Control": NO_CACHE},
            )
            return
        count, full = core.commit_send(self.app, tx)
        result = (
            ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
            if full
            else ResponseCode.TRANSACTION_FINISHED
        )
        self.send_result(200, TransactionResult(count, result), self.common_headers(version))
