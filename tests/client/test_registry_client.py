"""The schema registry client (pyspark_s2s.client.registry) against the reference server's
registry (``--schema-registry``, plain and TLS) and a stdlib HTTP server that records requests:
caching by id and by subject/version, URLs tried in turn, errors that name the URL and what was
asked, Basic authentication, and no password anywhere it could leak."""

from __future__ import annotations

import base64
import json
import pickle
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from serverproc import ServerThread

from pyspark_s2s.client.config import Secret, SiteToSiteClientConfig
from pyspark_s2s.client.registry import (
    RegistryConfig,
    SchemaRegistryClient,
    shared_client,
)
from pyspark_s2s.errors import ConfigError, SchemaRegistryError

V1 = json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]})
V2 = json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"},
                                                          {"name": "b", "type": ["null", "string"]}]})


def _base(srv: ServerThread) -> str:
    return srv.url[: -len("/nifi")] + "/schema-registry"


@pytest.fixture(scope="module")
def registry() -> Iterator[ServerThread]:
    with ServerThread("--schema-registry") as srv:
        yield srv


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/registry"


def test_register_fetch_and_cache(registry: ServerThread) -> None:
    client = SchemaRegistryClient(RegistryConfig((_base(registry),)))
    first = client.register("cache-value", V1)
    assert (first.subject, first.version) == ("cache-value", 1)
    assert client.register("cache-value", V1) == first  # cached: no request
    second = client.register("cache-value", V2)
    assert second.version == 2 and second.id != first.id
    sent = client.requests
    # a fresh client asks once per id and once per (subject, version); latest once per hour
    fresh = SchemaRegistryClient(RegistryConfig((_base(registry),)))
    for _ in range(3):
        assert json.loads(fresh.schema_by_id(first.id)) == json.loads(V1)
        assert fresh.schema_by_subject("cache-value", 1).id == first.id
        assert fresh.schema_by_subject("cache-value").id == second.id
    assert fresh.requests == 3
    assert client.requests == sent
    # pickles as a fresh client (pools and caches are per process); one shared client per config
    assert pickle.loads(pickle.dumps(fresh)).requests == 0
    assert shared_client(RegistryConfig((_base(registry),))) is shared_client(RegistryConfig((_base(registry),)))


def test_urls_tried_in_turn_and_errors_name_the_url(registry: ServerThread) -> None:
    dead = _closed_port_url()
    client = SchemaRegistryClient(RegistryConfig((dead, _base(registry))))
    got = client.register("turns-value", V1)
    assert json.loads(client.schema_by_id(got.id)) == json.loads(V1)
    with pytest.raises(SchemaRegistryError) as info:
        client.schema_by_id(424242)  # the live registry's 404 is the answer
    err = info.value
    assert err.http_status == 404 and "schema id 424242" in str(err) and "40403" in str(err)
    assert _base(registry) in str(err) and not err.retriable
    with pytest.raises(SchemaRegistryError) as info:
        client.schema_by_subject("no-such-subject")
    assert "no-such-subject" in str(info.value) and "40401" in str(info.value)
    only_dead = SchemaRegistryClient(RegistryConfig((dead,)))
    with pytest.raises(SchemaRegistryError) as info:
        only_dead.schema_by_id(1)
    assert dead in str(info.value) and "schema id 1" in str(info.value) and info.value.retriable
    assert pickle.loads(pickle.dumps(info.value)).message == info.value.message


def test_refused_registration_names_subject_and_message(registry: ServerThread) -> None:
    registry.admin.fault("fail_next", method="POST", path_contains="/subjects/strict-value", status=409)
    client = SchemaRegistryClient(RegistryConfig((_base(registry),)))
    with pytest.raises(SchemaRegistryError) as info:
        client.register("strict-value", V1)
    assert "strict-value" in str(info.value) and "incompatible" in str(info.value)
    assert info.value.http_status == 409


class _Recording(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "accept": self.headers.get("Accept")})
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(b"sr-user:sr-secret-pw").decode():
            body, status = b'{"error_code": 40101, "message": "Unauthorized"}', 401
        else:
            body, status = json.dumps({"schema": V1}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_basic_auth_and_no_password_anywhere() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        ok = SchemaRegistryClient(RegistryConfig((url,), username="sr-user", password=Secret("sr-secret-pw")))
        assert json.loads(ok.schema_by_id(5)) == json.loads(V1)
        assert _Recording.seen[-1]["path"] == "/schemas/ids/5"
        assert "application/vnd.schemaregistry.v1+json" in _Recording.seen[-1]["accept"]
        bad = SchemaRegistryClient(RegistryConfig((url,), username="sr-user", password=Secret("wrong-pw-123")))
        with pytest.raises(SchemaRegistryError) as info:
            bad.schema_by_id(5)
        assert info.value.http_status == 401 and url in str(info.value)
        for text in (str(info.value), repr(info.value), repr(bad), repr(bad.config), repr(ok)):
            assert "wrong-pw-123" not in text and "sr-secret-pw" not in text
    finally:
        server.shutdown()
        server.server_close()


def test_config_refusals() -> None:
    with pytest.raises(ConfigError) as info:
        RegistryConfig(())
    assert info.value.option == "schemaRegistryUrl"
    with pytest.raises(ConfigError) as info:
        RegistryConfig(("http://user:pw-in-url@host/",))
    assert "pw-in-url" not in str(info.value)
    with pytest.raises(ConfigError):
        RegistryConfig(("ftp://host",))
    with pytest.raises(ConfigError):
        RegistryConfig(("http://host",), username="u")


def test_https_with_the_client_tls_options() -> None:
    with ServerThread("--schema-registry", tls=True) as srv:
        assert srv.client_cert is not None and srv.ca is not None
        tls = SiteToSiteClientConfig(urls=srv.url, port_name="x", keystore_filename=srv.client_cert[0],
                                     key_filename=srv.client_cert[1], truststore_filename=str(srv.ca))
        client = SchemaRegistryClient(RegistryConfig((_base(srv),), tls=tls))
        got = client.register("tls-value", V1)
        assert json.loads(SchemaRegistryClient(RegistryConfig((_base(srv),), tls=tls)).schema_by_id(got.id)) == \
            json.loads(V1)
        # no client certificate: the secure server's 401, named
        plain = SiteToSiteClientConfig(urls=srv.url, port_name="x", truststore_filename=str(srv.ca))
        with pytest.raises(SchemaRegistryError) as info:
            SchemaRegistryClient(RegistryConfig((_base(srv),), tls=plain)).schema_by_id(got.id)
        assert info.value.http_status == 401
