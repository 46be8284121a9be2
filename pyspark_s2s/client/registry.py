"""A client of schema registries that speak Confluent's Schema Registry REST API (Confluent,
Karapace, Apicurio's ccompat API, Redpanda, and the reference server's ``--schema-registry``).

Owns: :class:`RegistryConfig` (the registry URLs, Basic authentication, a timeout, and the TLS
material, taken from the Site-to-Site client's options: the same trust store and client
certificate), :class:`SchemaRegistryClient` (the calls this package makes: a schema by id, a
subject's version or its latest, register, look up; every answer cached, by id and by subject
and version) and :func:`shared_client` (one client per configuration and process, so that a
Spark worker asks the registry once for each id it meets, whatever the number of FlowFiles).

The URLs are tried in turn, as NiFi's ``RestSchemaRegistryClient`` tries them: a registry that
cannot be reached or answers 5xx passes the request to the next one; a 4xx answer (no such id,
subject or version; a refused registration) is the answer. Errors are
:class:`~pyspark_s2s.errors.SchemaRegistryError` naming the URL, the subject or id and the
registry's own message; the password never appears in an error, a log line or a repr.

Must not import: the server, the Spark layer, ``requests``.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import urllib3
from urllib3.exceptions import HTTPError

from pyspark_s2s.client.config import Secret
from pyspark_s2s.errors import ConfigError, SchemaRegistryError

__all__ = ["MEDIA_TYPE", "RegisteredSchema", "RegistryConfig", "SchemaRegistryClient", "shared_client"]

logger = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = f"{MEDIA_TYPE}, application/vnd.schemaregistry+json; q=0.9, application/json; q=0.5"
#: how long a subject's ``latest`` version is kept before it is asked again (NiFi's
#: ConfluentSchemaRegistry "Cache Expiration" default: 1 hour); ids and numbered versions never change
LATEST_TTL = 3600.0
#: the most bytes of an answer that are read
_MAX_ANSWER = 8 << 20


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema as a registry knows it: its id, and where known its subject and version."""

    id: int
    schema: str
    subject: str | None = None
    version: int | None = None


@dataclass(frozen=True, repr=False)
class RegistryConfig:
    """Where the registry is and how to reach it (picklable; the password hidden in ``repr``).
    ``tls`` is a :class:`~pyspark_s2s.client.config.SiteToSiteClientConfig` whose trust store and
    key store are used for ``https://`` registry URLs (None: the system's trust)."""

    urls: tuple[str, ...]
    username: str | None = None
    password: Secret | None = None
    timeout: float = 30.0
    tls: Any = None
    _key: tuple[Any, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        urls = tuple(u.strip().rstrip("/") for u in self.urls if u and u.strip())
        if not urls:
            raise ConfigError("schemaRegistryUrl needs at least one URL (http:// or https://)",
                              option="schemaRegistryUrl")
        for url in urls:
            if not url.startswith(("http://", "https://")) or "@" in url.split("/", 3)[2]:
                raise ConfigError(f"schemaRegistryUrl: {url.split('@')[-1]!r} is not an http:// or https:// URL "
                                  "(credentials go in schemaRegistryUsername/schemaRegistryPassword)",
                                  option="schemaRegistryUrl")
        object.__setattr__(self, "urls", urls)
        if (self.username is None) != (self.password is None):
            raise ConfigError("schemaRegistryUsername and schemaRegistryPassword go together (Basic authentication)",
                              option="schemaRegistryPassword" if self.password is None else "schemaRegistryUsername")
        password = None if self.password is None else self.password.reveal()
        object.__setattr__(self, "_key", (urls, self.username, password, self.timeout, repr(self.tls)))

    def __repr__(self) -> str:
        auth = "" if self.username is None else f", username={self.username!r}, password='***'"
        return f"RegistryConfig(urls={list(self.urls)!r}{auth})"


def _message(body: bytes) -> str:
    """The registry's message in an error answer (``error_code`` and ``message``), else its text."""
    text = body[:2000].decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return text.strip() or "(no message)"
    if isinstance(obj, dict) and "message" in obj:
        code = obj.get("error_code")
        return f"{obj['message']}" + (f" (error_code {code})" if code is not None else "")
    return text.strip()


class SchemaRegistryClient:
    """The calls this package makes of a Confluent-compatible registry, cached. Thread-safe."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._pool: urllib3.PoolManager | None = None
        self._by_id: dict[int, str] = {}
        self._by_version: dict[tuple[str, int], RegisteredSchema] = {}
        self._latest: dict[str, tuple[float, RegisteredSchema]] = {}
        self._registered: dict[tuple[str, str], RegisteredSchema] = {}
        #: requests sent (tests and logs: the cache's effect is seen here)
        self.requests = 0

    def __repr__(self) -> str:
        return f"SchemaRegistryClient({self.config!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]  # a fresh client: pools and caches are per process

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.clear()

    # -- plumbing -------------------------------------------------------------------------------
    def _manager(self) -> urllib3.PoolManager:
        with self._lock:
            if self._pool is None:
                ctx: ssl.SSLContext | None = None
                if any(u.startswith("https://") for u in self.config.urls):
                    if self.config.tls is not None:
                        from pyspark_s2s.client.http import build_ssl_context
                        ctx = build_ssl_context(self.config.tls)
                    else:
                        ctx = ssl.create_default_context()
                timeout = urllib3.Timeout(connect=self.config.timeout, read=self.config.timeout)
                self._pool = urllib3.PoolManager(num_pools=4, maxsize=4, timeout=timeout, retries=False,
                                                 ssl_context=ctx)
            return self._pool

    def _headers(self, body: bool) -> dict[str, str]:
        headers = {"Accept": _ACCEPT}
        if body:
            headers["Content-Type"] = MEDIA_TYPE
        if self.config.username is not None and self.config.password is not None:
            token = f"{self.config.username}:{self.config.password.reveal()}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode("ascii")
        return headers

    def _call(self, method: str, path: str, what: str, payload: Any = None) -> Any:
        """The JSON answer of the first registry that answers (2xx, or a 4xx refusal raised);
        ``what`` says what was asked, for errors (``schema id 7``, ``subject 'orders'``)."""
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        failures: list[str] = []
        last_status: int | None = None
        for base in self.config.urls:
            url = base + path
            self.requests += 1
            try:
                resp = self._manager().request(method, url, body=body, headers=self._headers(body is not None),
                                               preload_content=False)
                try:
                    data = resp.read(_MAX_ANSWER + 1)
                finally:
                    resp.release_conn()
            except (HTTPError, OSError) as exc:
                reason = getattr(exc, "reason", None) or exc
                logger.debug("schema registry %s: %s %s failed: %s", base, method, path, reason)
                failures.append(f"{base}: unreachable ({type(reason).__name__}: {reason})")
                continue
            status = resp.status
            if 200 <= status < 300:
                if len(data) > _MAX_ANSWER:
                    raise SchemaRegistryError(f"schema registry {base}: the answer for {what} is larger than "
                                              f"{_MAX_ANSWER} bytes", peer=base, http_status=status)
                try:
                    return json.loads(data.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as exc:
                    raise SchemaRegistryError(f"schema registry {base}: the answer for {what} is not JSON: {exc}",
                                              peer=base, http_status=status) from None
            if status < 500:
                raise SchemaRegistryError(f"schema registry {base} refused {what}: HTTP {status}: {_message(data)}",
                                          peer=base, http_status=status, retriable=False)
            last_status = status
            failures.append(f"{base}: HTTP {status}: {_message(data)}")
        raise SchemaRegistryError(f"no schema registry answered for {what}: {'; '.join(failures)}",
                                  peer=", ".join(self.config.urls), http_status=last_status, retriable=True)

    # -- the calls ------------------------------------------------------------------------------
    def schema_by_id(self, schema_id: int) -> str:
        """The schema text of id ``schema_id`` (``GET /schemas/ids/{id}``), cached for good."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        answer = self._call("GET", f"/schemas/ids/{schema_id}", f"schema id {schema_id}")
        text = answer.get("schema") if isinstance(answer, dict) else None
        kind = (answer.get("schemaType") or "AVRO") if isinstance(answer, dict) else "AVRO"
        if not isinstance(text, str):
            raise SchemaRegistryError(f"schema registry answered for schema id {schema_id} without a schema",
                                      peer=", ".join(self.config.urls))
        if str(kind).upper() != "AVRO":
            raise SchemaRegistryError(f"schema id {schema_id} is a {kind} schema; only Avro schemas are read",
                                      peer=", ".join(self.config.urls))
        with self._lock:
            self._by_id[schema_id] = text
        return text

    def schema_by_subject(self, subject: str, version: int | None = None) -> RegisteredSchema:
        """Version ``version`` of ``subject`` (None: its latest, asked again after
        :data:`LATEST_TTL`), ``GET /subjects/{subject}/versions/{version|latest}``."""
        now = time.monotonic()
        with self._lock:
            if version is None:
                hit = self._latest.get(subject)
                if hit is not None and now - hit[0] < LATEST_TTL:
                    return hit[1]
            else:
                cached = self._by_version.get((subject, version))
                if cached is not None:
                    return cached
        which = "latest" if version is None else str(version)
        answer = self._call("GET", f"/subjects/{quote(subject, safe='')}/versions/{which}",
                            f"subject {subject!r} version {which}")
        entry = self._entry(answer, subject, f"subject {subject!r} version {which}")
        with self._lock:
            self._by_version[(subject, entry.version or 0)] = entry
            self._by_id.setdefault(entry.id, entry.schema)
            if version is None:
                self._latest[subject] = (now, entry)
        return entry

    def register(self, subject: str, schema: str) -> RegisteredSchema:
        """Register ``schema`` under ``subject`` (``POST /subjects/{subject}/versions``; a
        registry gives a schema it holds its id again), then learn its version
        (``POST /subjects/{subject}``). Cached per subject and schema text."""
        with self._lock:
            cached = self._registered.get((subject, schema))
        if cached is not None:
            return cached
        path = f"/subjects/{quote(subject, safe='')}"
        answer = self._call("POST", path + "/versions", f"the registration of a schema under subject {subject!r}",
                            {"schema": schema})
        if not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
            raise SchemaRegistryError(f"schema registry answered the registration under subject {subject!r} "
                                      f"without an id: {str(answer)[:200]}", peer=", ".join(self.config.urls))
        found = self._call("POST", path, f"the lookup of schema id {answer['id']} under subject {subject!r}",
                           {"schema": schema})
        entry = self._entry(found, subject, f"subject {subject!r}")
        with self._lock:
            self._registered[(subject, schema)] = entry
            self._by_id.setdefault(entry.id, entry.schema)
        return entry

    def _entry(self, answer: Any, subject: str, what: str) -> RegisteredSchema:
        if not isinstance(answer, dict) or not isinstance(answer.get("id"), int) \
                or not isinstance(answer.get("schema"), str):
            raise SchemaRegistryError(f"schema registry answered for {what} without an id and a schema",
                                      peer=", ".join(self.config.urls))
        version = answer.get("version")
        return RegisteredSchema(answer["id"], answer["schema"], str(answer.get("subject") or subject),
                                version if isinstance(version, int) else None)


_SHARED: dict[tuple[Any, ...], SchemaRegistryClient] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(config: RegistryConfig) -> SchemaRegistryClient:
    """This process's client for ``config`` (its caches shared by every read in the process: a
    Spark Python worker asks for each id once)."""
    with _SHARED_LOCK:
        client = _SHARED.get(config._key)
        if client is None:
            client = _SHARED[config._key] = SchemaRegistryClient(config)
        return client
