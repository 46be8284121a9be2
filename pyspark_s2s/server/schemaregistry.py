"""A Confluent-compatible schema registry in the reference server (``s2s serve --schema-registry``).

Owns: :class:`SchemaStore` (the subjects, their versions and the schema ids, durable under
``--data-dir`` as ``<data-dir>/schema-registry.json``, replaced atomically on every registration)
and :func:`handle`, which answers the Confluent Schema Registry REST API's subset that NiFi's
``RestSchemaRegistryClient`` and this package's client use, under :data:`PREFIX` on every node's
HTTP(S) port:

* ``GET /schemas/ids/{id}`` -> ``{"schema", "schemaType"}``; ``/subjects`` and ``/versions`` of an id;
* ``GET /subjects``; ``GET /subjects/{s}/versions``; ``GET /subjects/{s}/versions/{v|latest}``
  -> ``{"subject", "version", "id", "schema", "schemaType"}``;
* ``POST /subjects/{s}/versions`` (register; the same schema under a subject gets the same id and
  version back, and the same schema under another subject the same id);
* ``POST /subjects/{s}`` (look up a schema under a subject).

Answers carry Confluent's media type ``application/vnd.schemaregistry.v1+json``; errors are
Confluent's ``{"error_code", "message"}`` with its codes (40401 subject not found, 40402 version
not found, 40403 schema not found, 42201 invalid schema, 42202 invalid version, 50001 the store
failed, and the HTTP status as the code for a path or method the API does not have).

Schemas are Avro only (``schemaType`` other than ``AVRO`` is 42201) and are compared in a
whitespace-free JSON form: the same text laid out otherwise is the same schema. Left out (said in
docs/server.md): compatibility checks (every registration is accepted), deleting, modes and
configs, contexts, schema references, JSON Schema and Protobuf. A registration can be refused on
purpose with the admin API's fault injection (``fail_next`` with a path under :data:`PREFIX`),
which answers the fault's status with Confluent's body for it (409: incompatible).

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from pyspark_s2s.server import core
from pyspark_s2s.server.faults import FaultRegistry
from pyspark_s2s.server.model import Node
from pyspark_s2s.server.persist import write_json_atomic

__all__ = ["MEDIA_TYPE", "PREFIX", "RegistryApp", "RegistryError", "RegistryRequest", "SchemaStore", "handle", "registry_line"]

logger = logging.getLogger(__name__)

#: where the registry answers on every node
PREFIX = "/schema-registry"
#: Confluent's media type, on every answer
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
#: the request media types a POST may carry (Confluent's, plus plain JSON); none at all is taken too
_CONSUMES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
             "application/json", "application/octet-stream")
#: the largest request body taken (a schema is text; Confluent has no documented limit)
MAX_BODY = 4 << 20
_MAX_VERSION = (1 << 31) - 1
_FILE = "schema-registry.json"
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


class RegistryError(Exception):
    """An answer in Confluent's error shape: HTTP ``status``, ``error_code``, ``message``."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(status, error_code, message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error_code": self.error_code, "message": self.message}


def _subject_missing(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def _check_avro(node: Any, where: str, depth: int = 0) -> None:
    """A structural check of an Avro schema (stdlib only): what a type must hold to be one."""
    if depth > 64:
        raise ValueError(f"{where}: nested deeper than 64 levels")
    if isinstance(node, str):
        if not node:
            raise ValueError(f"{where}: an empty type name")
        return
    if isinstance(node, list):
        if not node:
            raise ValueError(f"{where}: an empty union")
        for k, branch in enumerate(node):
            if isinstance(branch, list):
                raise ValueError(f"{where}: a union directly inside a union")  # noqa: TRY004 - the schema's error
            _check_avro(branch, f"{where}[{k}]", depth + 1)
        return
    if not isinstance(node, dict) or "type" not in node:
        raise ValueError(f"{where}: a type is a name, a union (array) or an object with \"type\"")
    kind = node["type"]
    if kind in ("record", "error"):
        if not isinstance(node.get("name"), str) or not node["name"]:
            raise ValueError(f"{where}: a record needs a \"name\"")
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise ValueError(f"{where}: record {node['name']!r} needs \"fields\" (an array)")
        seen: set[str] = set()
        for k, field in enumerate(fields):
            if not isinstance(field, dict) or not isinstance(field.get("name"), str) or "type" not in field:
                raise ValueError(f"{where}.fields[{k}]: a field needs a \"name\" and a \"type\"")
            if field["name"] in seen:
                raise ValueError(f"{where}: field {field['name']!r} appears twice")
            seen.add(field["name"])
            _check_avro(field["type"], f"{where}.{field['name']}", depth + 1)
    elif kind == "enum":
        if not isinstance(node.get("name"), str) or not isinstance(node.get("symbols"), list):
            raise ValueError(f"{where}: an enum needs a \"name\" and \"symbols\"")
    elif kind == "fixed":
        if not isinstance(node.get("name"), str) or not isinstance(node.get("size"), int):
            raise ValueError(f"{where}: a fixed needs a \"name\" and a \"size\"")
    elif kind == "array":
        if "items" not in node:
            raise ValueError(f"{where}: an array needs \"items\"")
        _check_avro(node["items"], f"{where}.items", depth + 1)
    elif kind == "map":
        if "values" not in node:
            raise ValueError(f"{where}: a map needs \"values\"")
        _check_avro(node["values"], f"{where}.values", depth + 1)
    elif isinstance(kind, (dict, list)):
        _check_avro(kind, f"{where}.type", depth + 1)
    elif not isinstance(kind, str) or not kind:
        raise ValueError(f"{where}: \"type\" must be a name")


def normalized(text: str) -> str:
    """The form schemas are compared in (and stored as): the JSON without whitespace, keys as
    given. Raises :class:`RegistryError` 42201 when ``text`` is no Avro schema."""
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise RegistryError(422, 42201, f"Invalid schema: not JSON: {exc}") from None
    if isinstance(parsed, str) and parsed not in _PRIMITIVES:
        raise RegistryError(422, 42201, f"Invalid schema: {parsed!r} is not a primitive Avro type")
    try:
        _check_avro(parsed, "schema")
    except ValueError as exc:
        raise RegistryError(422, 42201, f"Invalid schema: {exc}") from None
    return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)


class SchemaStore:
    """Subjects -> versions -> schema ids, and ids -> schemas; thread-safe, durable when given a
    directory (loaded from it at start)."""

    def __init__(self, data_dir: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._path = None if data_dir is None else Path(data_dir) / _FILE
        self.schemas: dict[int, str] = {}  # id -> normalized schema
        self._ids: dict[str, int] = {}  # normalized schema -> id
        self.subjects: dict[str, list[int]] = {}  # subject -> ids, version k at index k-1
        if self._path is not None and self._path.exists():
            state = json.loads(self._path.read_text(encoding="utf-8"))
            self.schemas = {int(k): v for k, v in state["schemas"].items()}
            self._ids = {v: k for k, v in self.schemas.items()}
            self.subjects = {k: list(v) for k, v in state["subjects"].items()}

    def _save(self) -> None:
        if self._path is None:
            return
        try:
            write_json_atomic(self._path, {"schemas": {str(k): v for k, v in self.schemas.items()},
                                           "subjects": self.subjects})
        except OSError as exc:
            logger.error("schema registry: cannot write %s: %s", self._path, exc)
            raise RegistryError(500, 50001, f"Error in the backend data store: {exc.strerror or exc}") from None

    # -- reads ----------------------------------------------------------------------------------
    def schema(self, schema_id: int) -> str:
        with self._lock:
            text = self.schemas.get(schema_id)
        if text is None:
            raise RegistryError(404, 40403, f"Schema {schema_id} not found")
        return text

    def id_versions(self, schema_id: int) -> list[tuple[str, int]]:
        """(subject, version) of every registration of ``schema_id``; 40403 if it has none."""
        with self._lock:
            if schema_id not in self.schemas:
                raise RegistryError(404, 40403, f"Schema {schema_id} not found")
            return [(s, k + 1) for s, ids in sorted(self.subjects.items()) for k, i in enumerate(ids)
                    if i == schema_id]

    def subject_names(self) -> list[str]:
        with self._lock:
            return sorted(self.subjects)

    def versions(self, subject: str) -> list[int]:
        with self._lock:
            ids = self.subjects.get(subject)
            if ids is None:
                raise _subject_missing(subject)
            return list(range(1, len(ids) + 1))

    def version(self, subject: str, version: str) -> dict[str, Any]:
        if version == "latest" or version == "-1":
            number = -1
        else:
            number = int(version) if version.isdigit() else 0
            if not 1 <= number <= _MAX_VERSION:
                raise RegistryError(422, 42202, f"The specified version '{version}' is not a valid version id. "
                                                f"Allowed values are between [1, 2^31-1] and the string \"latest\"")
        with self._lock:
            ids = self.subjects.get(subject)
            if ids is None:
                raise _subject_missing(subject)
            if number == -1:
                number = len(ids)
            if number > len(ids):
                raise RegistryError(404, 40402, f"Version {version} not found.")
            schema_id = ids[number - 1]
            return _entry(subject, number, schema_id, self.schemas[schema_id])

    def lookup(self, subject: str, text: str) -> dict[str, Any]:
        norm = normalized(text)
        with self._lock:
            ids = self.subjects.get(subject)
            if ids is None:
                raise _subject_missing(subject)
            schema_id = self._ids.get(norm)
            if schema_id is None or schema_id not in ids:
                raise RegistryError(404, 40403, "Schema not found")
            return _entry(subject, ids.index(schema_id) + 1, schema_id, norm)

    # -- the one write --------------------------------------------------------------------------
    def register(self, subject: str, text: str) -> int:
        """The id of ``text`` under ``subject``: the existing one when the subject holds it,
        otherwise a new version (with the schema's id if another subject has it, else a new id)."""
        norm = normalized(text)
        with self._lock:
            schema_id = self._ids.get(norm)
            ids = self.subjects.get(subject, [])
            if schema_id is not None and schema_id in ids:
                return schema_id
            added_schema = schema_id is None
            if schema_id is None:
                schema_id = max(self.schemas, default=0) + 1
                self.schemas[schema_id] = norm
                self._ids[norm] = schema_id
            new_subject = subject not in self.subjects
            self.subjects.setdefault(subject, []).append(schema_id)
            try:
                self._save()
            except RegistryError:  # not on disk: not registered
                self.subjects[subject].pop()
                if new_subject:
                    del self.subjects[subject]
                if added_schema:
                    del self.schemas[schema_id]
                    del self._ids[norm]
                raise
            logger.info("schema registry: subject %r version %d is schema id %d", subject,
                        len(self.subjects[subject]), schema_id)
            return schema_id


def _entry(subject: str, version: int, schema_id: int, text: str) -> dict[str, Any]:
    return {"subject": subject, "version": version, "id": schema_id, "schemaType": "AVRO", "schema": text}


def registry_line(node_url: str) -> str:
    """The start-up line naming the registry's URL on the node whose base URL is ``node_url``."""
    base = node_url[: -len("/nifi")] if node_url.endswith("/nifi") else node_url.rstrip("/")
    return f"s2s: schema registry at {base}{PREFIX}"


# -- the HTTP side ----------------------------------------------------------------------------------


class RegistryApp(core.CoreApp, Protocol):
    """What the registry needs of the running server (:class:`~pyspark_s2s.server.app.ServerApp`)."""

    @property
    def schema_store(self) -> SchemaStore | None: ...

    @property
    def faults(self) -> FaultRegistry: ...


class RegistryRequest(Protocol):
    """What the registry needs of the request it answers (:class:`~pyspark_s2s.server.http.S2SHandler`)."""

    @property
    def app(self) -> RegistryApp: ...

    @property
    def node(self) -> Node: ...

    @property
    def headers(self) -> Any: ...

    @property
    def body(self) -> Any: ...

    def peer_dn(self) -> str | None: ...

    def send_bytes(self, status: int, body: bytes, content_type: str | None,
                   headers: dict[str, str] | None = None) -> None: ...


def _answer(h: RegistryRequest, status: int, obj: Any) -> None:
    h.send_bytes(status, json.dumps(obj).encode("utf-8"), MEDIA_TYPE, {"Cache-Control": "no-store"})


def _fault_error(status: int) -> RegistryError:
    if status == 409:
        return RegistryError(409, 409, "Schema being registered is incompatible with an earlier schema for subject "
                                       "(injected fault)")
    return RegistryError(status, 50001 if status >= 500 else status, f"Injected failure (fail_next, HTTP {status})")


def handle(h: RegistryRequest, method: str, path: str) -> None:
    """Answer a request under :data:`PREFIX` (``path`` starts with it)."""
    store = h.app.schema_store
    try:
        if store is None:
            raise RegistryError(404, 404, "HTTP 404 Not Found (the server runs without --schema-registry)")
        dn = h.peer_dn() if h.app.secure else None
        denied = core.framework_denial(h.app, dn)
        if denied is not None:
            raise RegistryError(denied, 40101 if denied == 401 else 40301,
                                "Unauthorized" if denied == 401 else "User is denied operation on this server")
        fault = h.app.faults.take(h.node.index, method, path)
        if fault is not None:
            if fault.kind == "delay":
                import time
                time.sleep(fault.seconds)
            else:
                raise _fault_error(fault.status)
        status, obj = _route(h, store, method, path[len(PREFIX):])
    except RegistryError as exc:
        status, obj = exc.status, exc.body()
    _answer(h, status, obj)


def _int_id(text: str) -> int:
    if not text.isdigit() or int(text) > _MAX_VERSION:
        raise RegistryError(404, 40403, f"Schema {text} not found")
    return int(text)


def _route(h: RegistryRequest, store: SchemaStore, method: str, sub: str) -> tuple[int, Any]:
    parts = [unquote(p) for p in sub.strip("/").split("/")] if sub.strip("/") else []
    get = method in ("GET", "HEAD")
    if len(parts) >= 3 and parts[0] == "schemas" and parts[1] == "ids" and len(parts) <= 4:
        if not get:
            raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
        schema_id = _int_id(parts[2])
        if len(parts) == 3:
            return 200, {"schema": store.schema(schema_id), "schemaType": "AVRO"}
        if parts[3] == "subjects":
            return 200, sorted({s for s, _ in store.id_versions(schema_id)})
        if parts[3] == "versions":
            return 200, [{"subject": s, "version": v} for s, v in store.id_versions(schema_id)]
    elif parts == ["subjects"]:
        if not get:
            raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
        return 200, store.subject_names()
    elif len(parts) == 2 and parts[0] == "subjects":
        if method != "POST":
            raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
        return 200, store.lookup(parts[1], _schema_text(h))
    elif len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
        if get:
            return 200, store.versions(parts[1])
        if method == "POST":
            return 200, {"id": store.register(parts[1], _schema_text(h))}
        raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
    elif len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
        if not get:
            raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
        return 200, store.version(parts[1], parts[3])
    raise RegistryError(404, 404, "HTTP 404 Not Found")


def _schema_text(h: RegistryRequest) -> str:
    """The ``schema`` of a POST's JSON body (Confluent's ``RegisterSchemaRequest``; other keys,
    such as the ``schemaType`` NiFi posts back, are taken; a type other than AVRO is 42201)."""
    ctype = (h.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    if ctype and ctype not in _CONSUMES:
        raise RegistryError(415, 415, f"HTTP 415 Unsupported Media Type ({ctype})")
    pieces: list[bytes] = []
    size = 0
    while piece := h.body.read(65536):
        size += len(piece)
        if size > MAX_BODY:
            raise RegistryError(413, 413, f"HTTP 413 Payload Too Large (more than {MAX_BODY} bytes)")
        pieces.append(piece)
    raw = b"".join(pieces)
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RegistryError(400, 400, f"Unexpected content: the body is not JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryError(422, 42201, "Invalid schema: the body needs a \"schema\" string")
    kind = body.get("schemaType") or "AVRO"
    if str(kind).upper() != "AVRO":
        raise RegistryError(422, 42201, f"Invalid schema: schemaType {kind!r} is not served here (AVRO only)")
    if body.get("references"):
        raise RegistryError(422, 42201, "Invalid schema: schema references are not served here")
    return str(body["schema"])
