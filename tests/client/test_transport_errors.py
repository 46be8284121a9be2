"""What a transport failure tells the caller (found by the fault suite, tests/faults/):

* a request that could not even connect (refused) raises :class:`PeerUnreachableError`: it was
  never sent, so a commit or confirm failing so was not carried out, and a caller may drop or
  resend without risking a duplicate; a connection that breaks after the request was sent stays a
  plain :class:`TransportError` (outcome unknown);
* a connection that breaks in the middle of a transaction does not get the "use https://" hint
  meant for a port that never answered HTTP.
"""

from __future__ import annotations

import pickle

import pytest
from clienthelp import PORT_ARGS

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.errors import PeerUnreachableError, TransportError
from pyspark_s2s.server.process import ServerSubprocess


def test_commit_to_a_stopped_server_is_peer_unreachable() -> None:
    server = ServerSubprocess(PORT_ARGS).start()
    try:
        with SiteToSiteClient(url=server.url, portName="in", timeout="5 sec") as client:
            tx = client.create_transaction("send")
            assert isinstance(tx, SendTransaction)
            tx.send(b"never committed")
            tx.confirm()
            server.stop()
            with pytest.raises(PeerUnreachableError) as info:
                tx.complete()
    finally:
        server.stop()
    err = info.value
    assert isinstance(err, TransportError) and err.retriable and err.http_status is None
    assert err.transaction == tx.transaction_id and "Cannot connect to" in err.message
    assert type(pickle.loads(pickle.dumps(err))) is PeerUnreachableError


def test_connection_broken_mid_upload_is_not_unreachable_and_has_no_scheme_hint(srv) -> None:
    srv.admin.fault("drop_mid_body", method="POST", path_contains="flow-files", after_bytes=100)
    with SiteToSiteClient(url=srv.url, portName="in", timeout="5 sec") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        with pytest.raises(TransportError) as info:
            for _ in range(50):
                tx.send(b"z" * 1000)
            tx.confirm()
    assert not isinstance(info.value, PeerUnreachableError)
    assert "https://" not in str(info.value) and info.value.transaction == tx.transaction_id
