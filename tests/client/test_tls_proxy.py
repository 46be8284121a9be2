"""HTTPS with generated certificates (PEM and PKCS12), access denial, and a real forward proxy
(proxy.py, with and without Basic auth, CONNECT for HTTPS) — docs/protocol.md §10, §12 items 7-10, 32."""

from __future__ import annotations

import pytest
from clienthelp import CLIENT_CONTENT, JAVA_ORDER_ATTRS, Stub

from pyspark_s2s.client import SendTransaction, SiteToSiteClient
from pyspark_s2s.errors import (
    ConfigError,
    NoPeerAvailableError,
    S2SError,
    TransportError,
)


def tls_opts(srv, kind: str = "pem") -> dict:
    if kind == "pem":
        cert, key = srv.client_cert
        return {"keystoreFilename": cert, "keyFilename": key, "truststoreFilename": str(srv.ca)}
    return {"keystoreFilename": str(srv.client_p12), "keystorePassword": srv.client_p12_password,
            "truststoreFilename": str(srv.ca)}


def roundtrip(c_send: SiteToSiteClient, c_recv: SiteToSiteClient, n: int = 20) -> None:
    done = c_send.send([(CLIENT_CONTENT, JAVA_ORDER_ATTRS)] * n)
    assert done.checksum == 1071206772 if n == 20 else True
    packets, got = c_recv.receive()
    assert len(packets) == n and packets[0].content == CLIENT_CONTENT
    assert got.flow_files == n


@pytest.mark.parametrize("kind", ["pem", "pkcs12"])
def test_https_send_receive(tls_srv, kind):  # items 7 (HTTPS), 15 (HTTPS)
    assert tls_srv.url.startswith("https://")
    with SiteToSiteClient(url=tls_srv.url, portName="in", **tls_opts(tls_srv, kind)) as s, \
            SiteToSiteClient(url=tls_srv.url, portName="out", **tls_opts(tls_srv, kind)) as r:
        assert s.site_info().secure is True
        assert all(p.secure for p, _ in s.peer_statuses("send"))
        roundtrip(s, r)


def test_https_large_and_compressed(tls_srv):  # item 10 (HTTPS)
    with SiteToSiteClient(url=tls_srv.url, portName="in", useCompression=True, **tls_opts(tls_srv)) as c:
        assert c.send([(b"a" * 10000, JAVA_ORDER_ATTRS)]).checksum == 1527414060


def test_wrong_pkcs12_password_names_the_option_not_the_secret(tls_srv):
    opts = tls_opts(tls_srv, "pkcs12") | {"keystorePassword": "not-the-password-xyz"}
    with pytest.raises(ConfigError) as info:
        SiteToSiteClient(url=tls_srv.url, portName="in", **opts).site_info()
    assert info.value.option == "keystorePassword"
    assert "not-the-password-xyz" not in str(info.value) and "not-the-password-xyz" not in repr(info.value)


def test_untrusted_server_certificate(tls_srv):
    with (
        SiteToSiteClient(url=tls_srv.url, portName="in", timeout="5 sec") as c,
        pytest.raises(S2SError, match="TLS|certificate"),
    ):
        c.site_info()


def test_access_denied_raises_at_once(tls_srv):  # item 9
    cert, key = tls_srv.denied_cert
    with (
        SiteToSiteClient(url=tls_srv.url, portName="in", keystoreFilename=cert, keyFilename=key,
                         truststoreFilename=str(tls_srv.ca)) as c,
        pytest.raises(S2SError) as info,
    ):
        c.create_transaction("send")
    assert info.value.http_status in (401, 403)
    assert not isinstance(info.value, NoPeerAvailableError)


def test_no_client_certificate_is_refused(tls_srv):
    with (
        SiteToSiteClient(url=tls_srv.url, portName="in", truststoreFilename=str(tls_srv.ca)) as c,
        pytest.raises(S2SError),
    ):
        c.create_transaction("send")


# -- proxy -------------------------------------------------------------------------------------


def test_send_receive_through_proxy(srv, proxy):  # items 7, 10, 15 via proxy
    opts = {"proxyHost": "127.0.0.1", "proxyPort": proxy.port}
    with SiteToSiteClient(url=srv.url, portName="in", **opts) as s, \
            SiteToSiteClient(url=srv.url, portName="out", **opts) as r:
        roundtrip(s, r)
        assert s.send([(b"a" * 10000, JAVA_ORDER_ATTRS)]).checksum == 1527414060


def test_send_receive_through_auth_proxy(srv, auth_proxy):  # item 7 (proxy auth), 15
    opts = {"proxyHost": "127.0.0.1", "proxyPort": auth_proxy.port, "proxyUsername": "proxyuser",
            "proxyPassword": "proxy-secret-pw"}
    with SiteToSiteClient(url=srv.url, portName="in", **opts) as s, \
            SiteToSiteClient(url=srv.url, portName="out", **opts) as r:
        roundtrip(s, r)
        assert "proxy-secret-pw" not in repr(s) and "proxy-secret-pw" not in repr(s.config)


def test_auth_proxy_without_credentials_fails(srv, auth_proxy):  # item 8
    with (
        SiteToSiteClient(url=srv.url, portName="in", proxyHost="127.0.0.1", proxyPort=auth_proxy.port) as c,
        pytest.raises(TransportError, match="407") as info,
    ):
        c.create_transaction("send")
    assert info.value.http_status == 407


def test_auth_proxy_wrong_password_fails_without_echo(srv, auth_proxy):
    with (
        SiteToSiteClient(url=srv.url, portName="in", proxyHost="127.0.0.1", proxyPort=auth_proxy.port,
                         proxyUsername="proxyuser", proxyPassword="wrong-pw-123") as c,
        pytest.raises(TransportError) as info,
    ):
        c.create_transaction("send")
    assert "wrong-pw-123" not in str(info.value)


def test_https_through_auth_proxy_connect(tls_srv, auth_proxy):  # item 7 HTTPS + proxy auth
    opts = {"proxyHost": "127.0.0.1", "proxyPort": auth_proxy.port, "proxyUsername": "proxyuser",
            "proxyPassword": "proxy-secret-pw", **tls_opts(tls_srv)}
    with SiteToSiteClient(url=tls_srv.url, portName="in", **opts) as s, \
            SiteToSiteClient(url=tls_srv.url, portName="out", **opts) as r:
        roundtrip(s, r)


def test_proxy_407_challenge_is_answered_and_remembered():  # item 32
    with Stub() as stub:
        stub.nifi_site(input_ports={"in": "in-id"})
        stub.routes[("POST", "/nifi-api/data-transfer/input-ports/in-id/transactions/")] = \
            lambda rec: __import__("clienthelp").Reply(202, b"1345413116") if rec.path.endswith("flow-files") \
            else __import__("clienthelp").Reply(200, b'{"flowFileSent":1,"responseCode":13}')
        stub.routes[("DELETE", "/nifi-api/data-transfer/input-ports/in-id/transactions/")] = \
            __import__("clienthelp").Reply(200, b'{"flowFileSent":1,"responseCode":13}')
        stub.proxy_auth = "Basic dXNlcjpncmFudGVk"
        with SiteToSiteClient(url="http://127.0.0.1:1/nifi", portName="in", proxyHost="127.0.0.1",
                              proxyPort=stub.port, proxyUsername="user", proxyPassword="granted") as c:
            tx = c.create_transaction("send")
            assert isinstance(tx, SendTransaction)
            tx.send(CLIENT_CONTENT, JAVA_ORDER_ATTRS)
            tx.confirm()
            assert tx.complete().flow_files == 1
        first, second = stub.requests[0], stub.requests[1]
        assert first.method == second.method == "GET" and first.path.endswith("/nifi-api/site-to-site")
        assert "Proxy-Authorization" not in first.headers
        assert second.headers["Proxy-Authorization"] == "Basic dXNlcjpncmFudGVk"
        # remembered: every later request carries the credentials, the upload was never challenged
        assert all(r.headers.get("Proxy-Authorization") == "Basic dXNlcjpncmFudGVk" for r in stub.requests[1:])
        upload = [r for r in stub.requests if r.path.endswith("/flow-files")]
        assert len(upload) == 1 and upload[0].path.startswith("http://127.0.0.1:")


def test_secrets_not_in_debug_logs(tls_srv, auth_proxy, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    opts = {"proxyHost": "127.0.0.1", "proxyPort": auth_proxy.port, "proxyUsername": "proxyuser",
            "proxyPassword": "proxy-secret-pw", **tls_opts(tls_srv, "pkcs12")}
    with SiteToSiteClient(url=tls_srv.url, portName="in", **opts) as c:
        c.send([b"logged"])
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "proxy-secret-pw" not in text and tls_srv.client_p12_password not in text
    assert "cHJveHl1c2VyOnByb3h5LXNlY3JldC1wdw" not in text  # base64 of the credentials


def test_address_mapping_keeps_tls_name_checks(tls_srv):
    port = int(tls_srv.url.split(":")[2].split("/")[0])
    ok = f"localhost:{port}=127.0.0.1:{port}"
    with SiteToSiteClient(url=f"https://localhost:{port}/nifi", portName="in", peerAddressMap=ok,
                          **tls_opts(tls_srv)) as c:
        assert c.site_info().active_url == f"https://localhost:{port}/nifi-api"
        assert c.send([b"mapped over TLS"]).flow_files == 1
    wrong = f"nifi.example.invalid:{port}=127.0.0.1:{port}"
    with (
        SiteToSiteClient(url=f"https://nifi.example.invalid:{port}/nifi", portName="in", peerAddressMap=wrong,
                         timeout="5 sec", **tls_opts(tls_srv)) as c,
        pytest.raises(S2SError, match="TLS") as info,
    ):
        c.site_info()
    assert "nifi.example.invalid" in str(info.value)


def test_combined_encrypted_pem_keystore_and_pkcs12_truststore(tls_srv, tmp_path):
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    cert_pem, key_pem = (Path(p).read_bytes() for p in tls_srv.client_cert)
    key = serialization.load_pem_private_key(key_pem, password=None)
    enc = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(b"pem-pass-1"))
    combined = tmp_path / "client-all.pem"
    combined.write_bytes(cert_pem + enc)
    ca = x509.load_pem_x509_certificate(Path(tls_srv.ca).read_bytes())
    trust = tmp_path / "trust.p12"
    trust.write_bytes(pkcs12.serialize_key_and_certificates(
        b"ca", None, None, [ca], serialization.BestAvailableEncryption(b"trust-pass-1")))
    with SiteToSiteClient(url=tls_srv.url, portName="in", keystoreFilename=str(combined),
                          keystorePassword="pem-pass-1", truststoreFilename=str(trust),
                          truststorePassword="trust-pass-1") as c:
        assert c.config.keystore_type == "PEM" and c.config.truststore_type == "PKCS12"
        assert c.send([b"pem+p12"]).flow_files == 1
    with pytest.raises(ConfigError) as info:
        SiteToSiteClient(url=tls_srv.url, portName="in", keystoreFilename=str(combined),
                         keystorePassword="wrong-pem-pass", truststoreFilename=str(trust),
                         truststorePassword="trust-pass-1").site_info()
    assert info.value.option == "keystoreFilename" and "wrong-pem-pass" not in str(info.value)


def test_port_policy_refusal_tries_other_peers_and_is_not_retriable():
    # The client's DN may read site info and use "in2", but not "in": the handshake answers
    # 401 with response code 240 (port-level UNAUTHORIZED, docs/protocol.md §8). NiFi's client
    # penalizes the peer and tries the next one (it does not raise at once); with no other
    # peer left the error says so, and it is not worth retrying.
    from serverproc import ServerProcess

    from pyspark_s2s.server.tls import CLIENT_DN

    with ServerProcess("--input-port", "in", "--input-port", "in2", "--nodes", "2",
                       "--allow", f"in2={CLIENT_DN}", tls=True) as srv:
        port_id = srv.port_id("in")  # not listed to this DN, so named by identifier
        opts = tls_opts(srv)
        with (
            SiteToSiteClient(url=srv.url, portIdentifier=port_id, **opts) as c,
            pytest.raises(NoPeerAvailableError) as info,
        ):
            c.create_transaction("send")
        assert info.value.retriable is False
        text = str(info.value)
        assert text.count("HTTP 401, response code 240") == 2  # both nodes were tried, once each
        with SiteToSiteClient(url=srv.url, portName="in2", **opts) as c:
            assert c.send([(b"allowed", {"k": "v"})]).flow_files == 1
