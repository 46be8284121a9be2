"""The reference server's Confluent-compatible schema registry (``--schema-registry``): the REST
subset NiFi's RestSchemaRegistryClient and ours use, Confluent's answers and error shapes
(checked against Confluent's API reference: docs/server.md "Schema registry"), durability under
``--data-dir``, and a refusal injected through the admin API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from serverproc import ServerThread

MEDIA = "application/vnd.schemaregistry.v1+json"
V1 = {"type": "record", "name": "order", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
V2 = {"type": "record", "name": "order", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
                 {"name": "qty", "type": ["null", "int"], "default": None}]}


def _base(srv: ServerThread) -> str:
    return srv.url[: -len("/nifi")] + "/schema-registry"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread("--schema-registry", "--data-dir", str(tmp_path_factory.mktemp("sr"))) as srv:
        yield srv


def _post(base: str, path: str, schema: object, **extra: object) -> requests.Response:
    body: dict[str, Any] = {"schema": schema if isinstance(schema, str) else json.dumps(schema), **extra}
    return requests.post(base + path, json=body, headers={"Content-Type": MEDIA}, timeout=10)


def _error(resp: requests.Response, status: int, code: int) -> str:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"] == MEDIA
    body = resp.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == code
    return str(body["message"])


def test_register_lookup_and_read_back_as_confluent_answers(registry: ServerThread) -> None:
    base = _base(registry)
    first = _post(base, "/subjects/orders-value/versions", V1)
    assert first.status_code == 200 and first.headers["Content-Type"] == MEDIA
    sid = first.json()["id"]
    assert set(first.json()) == {"id"}
    # idempotent: the same schema (laid out otherwise) under the subject is the same id, no new version
    again = _post(base, "/subjects/orders-value/versions", json.dumps(V1, indent=2))
    assert again.json() == {"id": sid}
    sid2 = _post(base, "/subjects/orders-value/versions", V2).json()["id"]
    assert sid2 != sid
    # the same schema under another subject keeps its id, at that subject's version 1
    assert _post(base, "/subjects/audit-value/versions", V2).json() == {"id": sid2}

    got = requests.get(f"{base}/schemas/ids/{sid}", timeout=10)
    assert got.headers["Content-Type"] == MEDIA
    assert json.loads(got.json()["schema"]) == V1 and got.json()["schemaType"] == "AVRO"
    assert requests.get(f"{base}/schemas/ids/{sid2}/subjects", timeout=10).json() == ["audit-value", "orders-value"]
    assert requests.get(f"{base}/schemas/ids/{sid2}/versions", timeout=10).json() == [
        {"subject": "audit-value", "version": 1}, {"subject": "orders-value", "version": 2}]
    assert {"audit-value", "orders-value"} <= set(requests.get(f"{base}/subjects", timeout=10).json())
    assert requests.get(f"{base}/subjects/orders-value/versions", timeout=10).json() == [1, 2]
    latest = requests.get(f"{base}/subjects/orders-value/versions/latest", timeout=10).json()
    assert {k: latest[k] for k in ("subject", "version", "id")} == {"subject": "orders-value", "version": 2, "id": sid2}
    assert json.loads(latest["schema"]) == V2
    one = requests.get(f"{base}/subjects/orders-value/versions/1", timeout=10).json()
    assert (one["version"], one["id"]) == (1, sid)
    # lookup (NiFi posts back what GET /schemas/ids/{id} answered, schemaType included)
    found = requests.post(f"{base}/subjects/orders-value", json=got.json(), timeout=10)
    assert found.status_code == 200
    assert {k: found.json()[k] for k in ("subject", "version", "id")} == {"subject": "orders-value", "version": 1,
                                                                          "id": sid}
    # a subject name that needs URL encoding
    enc = _post(base, "/subjects/a%2Fb%20c/versions", V1)
    assert enc.json() == {"id": sid}
    assert requests.get(f"{base}/subjects/a%2Fb%20c/versions/latest", timeout=10).json()["subject"] == "a/b c"


def test_confluent_error_codes(registry: ServerThread) -> None:
    base = _base(registry)
    sid = _post(base, "/subjects/errs/versions", V1).json()["id"]
    assert "not found" in _error(requests.get(f"{base}/subjects/nobody/versions", timeout=10), 404, 40401)
    _error(requests.get(f"{base}/subjects/nobody/versions/latest", timeout=10), 404, 40401)
    _error(requests.get(f"{base}/subjects/errs/versions/9", timeout=10), 404, 40402)
    _error(requests.get(f"{base}/subjects/errs/versions/0", timeout=10), 422, 42202)
    _error(requests.get(f"{base}/subjects/errs/versions/x", timeout=10), 422, 42202)
    _error(requests.get(f"{base}/schemas/ids/99999", timeout=10), 404, 40403)
    _error(requests.get(f"{base}/schemas/ids/99999/versions", timeout=10), 404, 40403)
    _error(_post(base, "/subjects/nobody", V1), 404, 40401)
    _error(_post(base, "/subjects/errs", V2), 404, 40403)
    _error(_post(base, "/subjects/errs/versions", "{not json"), 422, 42201)
    _error(_post(base, "/subjects/errs/versions", {"type": "record", "name": "x"}), 422, 42201)
    _error(_post(base, "/subjects/errs/versions", '"decimalish"'), 422, 42201)
    _error(_post(base, "/subjects/errs/versions", V1, schemaType="PROTOBUF"), 422, 42201)
    _error(requests.post(f"{base}/subjects/errs/versions", data=b"{", headers={"Content-Type": MEDIA}, timeout=10),
           400, 400)
    _error(requests.get(f"{base}/config", timeout=10), 404, 404)
    _error(requests.delete(f"{base}/subjects/errs/versions/1", timeout=10), 405, 405)
    _error(requests.post(f"{base}/subjects/errs/versions", data=json.dumps({"schema": json.dumps(V1)}),
                         headers={"Content-Type": "text/csv"}, timeout=10), 415, 415)
    # nothing above changed the subject
    assert requests.get(f"{base}/subjects/errs/versions", timeout=10).json() == [1]
    assert requests.get(f"{base}/subjects/errs/versions/latest", timeout=10).json()["id"] == sid


def test_injected_refusal_is_confluents_incompatible_answer(registry: ServerThread) -> None:
    base = _base(registry)
    registry.admin.fault("fail_next", method="POST", path_contains="/schema-registry/subjects/refused", status=409)
    _error(_post(base, "/subjects/refused/versions", V1), 409, 409)
    assert _post(base, "/subjects/refused/versions", V1).status_code == 200  # one refusal only


def test_durable_under_data_dir(tmp_path: Path) -> None:
    with ServerThread("--schema-registry", "--data-dir", str(tmp_path)) as srv:
        base = _base(srv)
        a = _post(base, "/subjects/s/versions", V1).json()["id"]
        b = _post(base, "/subjects/s/versions", V2).json()["id"]
    assert (tmp_path / "schema-registry.json").exists()
    with ServerThread("--schema-registry", "--data-dir", str(tmp_path)) as srv:
        base = _base(srv)
        assert requests.get(f"{base}/subjects/s/versions", timeout=10).json() == [1, 2]
        assert json.loads(requests.get(f"{base}/schemas/ids/{b}", timeout=10).json()["schema"]) == V2
        assert _post(base, "/subjects/s/versions", V1).json() == {"id": a}  # still idempotent
        other = {"type": "record", "name": "other", "fields": []}
        assert _post(base, "/subjects/t/versions", other).json()["id"] not in (a, b)


def test_off_without_the_flag() -> None:
    with ServerThread() as srv:
        resp = requests.get(_base(srv) + "/subjects", timeout=10)
        assert "--schema-registry" in _error(resp, 404, 404)
