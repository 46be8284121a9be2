"""``integration/setup_flow.py`` against a small stand-in for NiFi's REST API on 127.0.0.1.

The stand-in enforces the request rules NiFi 2.x's ``ProcessGroupResource``/``InputPortResource``/
``OutputPortResource`` apply to these calls (revision version 0 on create, no component id,
connectable types, the current revision on a run-status change, no start of a running or disabled
port), so the script's JSON shapes are checked, and running it twice must create nothing new. Its
root group holds an invalid processor: starting the whole group is refused, as NiFi refuses it, so
the script must start just its two ports. Real NiFi is exercised by the integration suite.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "integration" / "setup_flow.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("s2s_integration_setup_flow", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeNiFi:
    def __init__(self) -> None:
        self.root = str(uuid.uuid4())
        self.input_ports: dict[str, str] = {}  # id -> name
        self.output_ports: dict[str, str] = {}
        self.connections: dict[str, tuple[str, str]] = {}
        self.port_state: dict[str, str] = {}  # port id -> STOPPED / RUNNING / DISABLED
        self.revision: dict[str, int] = {}  # port id -> revision version
        self.group_starts = 0
        self.creates = 0
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            return self._handle(method, path, body)

    def _handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if not path.startswith("/nifi-api/"):
            return 404, None
        path = path[len("/nifi-api") :]
        if method == "GET" and path == "/flow/about":
            return 200, {"about": {"title": "NiFi", "version": "2.10.0"}}
        if method == "GET" and path == "/flow/process-groups/root":
            return 200, {
                "processGroupFlow": {
                    "id": self.root,
                    "flow": {
                        "inputPorts": [
                            {"id": i, "component": {"id": i, "name": n}}
                            for i, n in self.input_ports.items()
                        ],
                        "outputPorts": [
                            {"id": i, "component": {"id": i, "name": n}}
                            for i, n in self.output_ports.items()
                        ],
                        "connections": [
                            {
                                "id": c,
                                "component": {
                                    "id": c,
                                    "source": {"id": s, "type": "INPUT_PORT"},
                                    "destination": {"id": d, "type": "OUTPUT_PORT"},
                                },
                            }
                            for c, (s, d) in self.connections.items()
                        ],
                    },
                }
            }
        for kind, table in (("input-ports", self.input_ports), ("output-ports", self.output_ports)):
            if method == "POST" and path == f"/process-groups/{self.root}/{kind}":
                if body.get("revision", {}).get("version") != 0:
                    return 400, "A revision of 0 must be specified"
                component = body["component"]
                if component.get("id") is not None:
                    return 400, "port ID cannot be specified"
                position = component.get("position")
                if position is not None and (position.get("x") is None or position.get("y") is None):
                    return 400, "The x and y coordinate of the proposed position must be specified."
                if component["name"] in table.values():
                    return 409, "duplicate public port name"
                new_id = str(uuid.uuid4())
                table[new_id] = component["name"]
                self.port_state[new_id] = "STOPPED"
                self.revision[new_id] = 1
                self.creates += 1
                return 201, self._port_entity(new_id, table)
            prefix = f"/{kind}/"
            if path.startswith(prefix):
                port_id, _, rest = path[len(prefix):].partition("/")
                if port_id not in table:
                    return 404, f"Unable to find port with id '{port_id}'."
                if method == "GET" and rest == "":
                    return 200, self._port_entity(port_id, table)
                if method == "PUT" and rest == "run-status":
                    return self._run_status(port_id, table, body)
        if method == "POST" and path == f"/process-groups/{self.root}/connections":
            if body.get("revision", {}).get("version") != 0:
                return 400, "A revision of 0 must be specified"
            component = body["component"]
            source, destination = component["source"], component["destination"]
            if source.get("type") != "INPUT_PORT" or source["id"] not in self.input_ports:
                return 400, "bad source"
            if destination.get("type") != "OUTPUT_PORT" or destination["id"] not in self.output_ports:
                return 400, "bad destination"
            if source.get("groupId", self.root) != self.root or destination.get("groupId", self.root) != self.root:
                return 400, "not in this group"
            new_id = str(uuid.uuid4())
            self.connections[new_id] = (source["id"], destination["id"])
            self.creates += 1
            return 201, {"id": new_id, "component": component}
        if method == "PUT" and path == f"/flow/process-groups/{self.root}":
            # the root group also holds an invalid processor: NiFi refuses to schedule the group
            self.group_starts += 1
            return 409, "UpdateAttribute[id=...] cannot be started because it is not valid"
        return 404, f"no such resource {method} {path}"

    def _port_entity(self, port_id: str, table: dict[str, str]) -> dict[str, Any]:
        return {
            "id": port_id,
            "revision": {"version": self.revision[port_id]},
            "component": {"id": port_id, "name": table[port_id], "state": self.port_state[port_id]},
        }

    def _run_status(self, port_id: str, table: dict[str, str], body: Any) -> tuple[int, Any]:
        revision = (body or {}).get("revision")
        if revision is None:
            return 400, "Revision must be specified."
        if revision.get("version") != self.revision[port_id]:
            return 400, f"Error: {revision.get('version')} is not the most up-to-date revision."
        state = body.get("state")
        if state not in ("RUNNING", "STOPPED", "DISABLED"):
            return 400, "The run status must be RUNNING, STOPPED or DISABLED."
        current = self.port_state[port_id]
        if state == "RUNNING" and current != "STOPPED":
            return 409, f"Port {port_id} cannot be started because it is {current}"
        self.port_state[port_id] = state
        self.revision[port_id] += 1
        return 200, self._port_entity(port_id, table)


@pytest.fixture
def fake_nifi() -> Iterator[tuple[FakeNiFi, str]]:
    nifi = FakeNiFi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, answer = nifi.handle(self.command, self.path, body)
            payload = (json.dumps(answer) if not isinstance(answer, str) else answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield nifi, f"http://127.0.0.1:{server.server_address[1]}/nifi"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_creates_flow_and_is_idempotent(
    fake_nifi: tuple[FakeNiFi, str], capsys: pytest.CaptureFixture[str]
) -> None:
    nifi, url = fake_nifi
    script = _load_script()
    assert script.main(["--url", url, "--wait", "5"]) == 0
    assert sorted(nifi.input_ports.values()) == ["from-spark"]
    assert sorted(nifi.output_ports.values()) == ["to-spark"]
    ((source, destination),) = nifi.connections.values()
    assert nifi.input_ports[source] == "from-spark"
    assert nifi.output_ports[destination] == "to-spark"
    assert nifi.port_state == {source: "RUNNING", destination: "RUNNING"}
    assert nifi.group_starts == 0
    first = capsys.readouterr().out
    assert source in first and destination in first

    assert script.main(["--url", url, "--wait", "5"]) == 0
    assert nifi.creates == 3
    assert nifi.port_state == {source: "RUNNING", destination: "RUNNING"}
    assert capsys.readouterr().out == first


def test_existing_stopped_and_disabled_ports_are_started(fake_nifi: tuple[FakeNiFi, str]) -> None:
    nifi, url = fake_nifi
    script = _load_script()
    assert script.main(["--url", url, "--wait", "5"]) == 0
    (source,) = nifi.input_ports
    (destination,) = nifi.output_ports
    nifi.port_state.update({source: "DISABLED", destination: "STOPPED"})
    assert script.main(["--url", url, "--wait", "5"]) == 0
    assert nifi.port_state == {source: "RUNNING", destination: "RUNNING"}
    assert nifi.creates == 3 and nifi.group_starts == 0


def test_unreachable_nifi_fails_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    script = _load_script()
    # a port nobody listens on: bind, read the number, close
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert script.main(["--url", f"http://127.0.0.1:{port}/nifi", "--wait", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("setup_flow: NiFi at http://127.0.0.1:") and "\n" not in err


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://localhost:8080/nifi", "http://localhost:8080/nifi-api"),
        ("http://localhost:8080/nifi/", "http://localhost:8080/nifi-api"),
        ("http://localhost:8080/nifi-api", "http://localhost:8080/nifi-api"),
        ("http://localhost:8080", "http://localhost:8080/nifi-api"),
    ],
)
def test_api_base(url: str, expected: str) -> None:
    assert _load_script().api_base(url) == expected
