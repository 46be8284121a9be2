#!/usr/bin/env python3
"""Create the integration flow in a running NiFi through its REST API (standard library only).

The flow, in the root process group: input port ``from-spark`` -> connection -> output port
``to-spark``, both ports started (only those two: the rest of an existing flow is left as it is, so
one invalid processor elsewhere in the root group cannot keep the ports stopped). Ports in the root group are Site-to-Site ("public") ports, so a
client sends into ``from-spark`` and receives the same FlowFiles back from ``to-spark``.

Idempotent: existing ports (matched by name) and an existing connection between them are reused;
running it twice changes nothing. Works against the unsecured NiFi of ``docker-compose.yml``
(plain HTTP, anonymous access); it does not log in.

    python3 integration/setup_flow.py [--url http://localhost:8080/nifi] [--wait 300]

``--url`` defaults to ``$NIFI_URL`` or ``http://localhost:8080/nifi``. Prints the port ids.

REST calls (NiFi 2.x ``/nifi-api``):
  GET  /flow/about                               (wait until NiFi answers)
  GET  /flow/process-groups/root                 (root group id, existing ports and connections)
  POST /process-groups/{root}/input-ports        {"revision": {"version": 0}, "component": {"name": ...}}
  POST /process-groups/{root}/output-ports       (same shape)
  POST /process-groups/{root}/connections        {"revision": {"version": 0}, "component":
                                                  {"source": {"id", "groupId", "type": "INPUT_PORT"},
                                                   "destination": {"id", "groupId", "type": "OUTPUT_PORT"}}}
  GET  /input-ports/{id}, /output-ports/{id}     (the port's current revision and run state)
  PUT  /input-ports/{id}/run-status              {"revision": {"version": N}, "state": "RUNNING"}
  PUT  /output-ports/{id}/run-status             (same shape; a DISABLED port is set STOPPED first)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

DEFAULT_URL = "http://localhost:8080/nifi"
CLIENT_ID = f"pyspark-s2s-setup-{uuid.uuid4()}"


class SetupError(Exception):
    """A REST call failed; the message says which and why."""


def api_base(url: str) -> str:
    """``http://host:8080/nifi`` (or ``.../nifi-api``, or ``http://host:8080``) -> ``http://host:8080/nifi-api``."""
    url = url.strip().rstrip("/")
    for suffix in ("/nifi-api", "/nifi"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
            break
    return url + "/nifi-api"


def call(base: str, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace").strip()[:500]
        raise SetupError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SetupError(f"{method} {path}: {exc}") from None
    return json.loads(payload) if payload.strip() else None


def wait_for_nifi(base: str, wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            call(base, "GET", "/flow/about", timeout=10)
            return
        except SetupError as exc:
            if time.monotonic() >= deadline:
                raise SetupError(f"NiFi at {base} did not answer within {wait_seconds:.0f} s ({exc})") from None
        time.sleep(3)


def _by_name(entities: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    matches = [e for e in entities if e.get("component", {}).get("name") == name]
    if len(matches) > 1:
        raise SetupError(f"more than one port named {name!r} in the root group")
    return matches[0] if matches else None


def ensure_port(base: str, group_id: str, kind: str, name: str, existing: list[dict[str, Any]],
                position: dict[str, float]) -> str:
    """Id of the root-group port *name* of *kind* ("input-ports"/"output-ports"), created if missing."""
    found = _by_name(existing, name)
    if found is not None:
        return str(found["id"])
    created = call(
        base,
        "POST",
        f"/process-groups/{group_id}/{kind}",
        {
            "revision": {"clientId": CLIENT_ID, "version": 0},
            "component": {"name": name, "position": position},
        },
    )
    return str(created["id"])


def ensure_connection(base: str, group_id: str, source_id: str, destination_id: str,
                      existing: list[dict[str, Any]]) -> str:
    for connection in existing:
        component = connection.get("component", {})
        if (component.get("source", {}).get("id") == source_id
                and component.get("destination", {}).get("id") == destination_id):
            return str(connection["id"])
    created = call(
        base,
        "POST",
        f"/process-groups/{group_id}/connections",
        {
            "revision": {"clientId": CLIENT_ID, "version": 0},
            "component": {
                "source": {"id": source_id, "groupId": group_id, "type": "INPUT_PORT"},
                "destination": {"id": destination_id, "groupId": group_id, "type": "OUTPUT_PORT"},
            },
        },
    )
    return str(created["id"])


def start_port(base: str, kind: str, port_id: str) -> None:
    """Set one port (*kind* "input-ports"/"output-ports") RUNNING through its run-status endpoint.

    NiFi checks the revision (optimistic locking), so the current one is read first; a port that
    already runs is left alone (asking again would be refused), a DISABLED one is enabled (STOPPED)
    before it is started, as NiFi allows no direct DISABLED -> RUNNING transition.
    """
    entity = call(base, "GET", f"/{kind}/{port_id}")
    state = entity.get("component", {}).get("state")
    steps = {"RUNNING": [], "DISABLED": ["STOPPED", "RUNNING"]}.get(state, ["RUNNING"])
    for target in steps:
        revision = entity.get("revision", {})
        entity = call(
            base,
            "PUT",
            f"/{kind}/{port_id}/run-status",
            {
                "revision": {"clientId": CLIENT_ID, "version": revision.get("version", 0)},
                "state": target,
                "disconnectedNodeAcknowledged": False,
            },
        )


def setup_flow(base: str, input_port: str, output_port: str) -> dict[str, str]:
    flow = call(base, "GET", "/flow/process-groups/root")["processGroupFlow"]
    group_id = flow["id"]
    contents = flow.get("flow", {})
    input_id = ensure_port(base, group_id, "input-ports", input_port,
                           contents.get("inputPorts", []), {"x": 0.0, "y": 0.0})
    output_id = ensure_port(base, group_id, "output-ports", output_port,
                            contents.get("outputPorts", []), {"x": 0.0, "y": 300.0})
    connection_id = ensure_connection(base, group_id, input_id, output_id,
                                      contents.get("connections", []))
    start_port(base, "input-ports", input_id)
    start_port(base, "output-ports", output_id)
    return {
        "root_group": group_id,
        "input_port": input_id,
        "output_port": output_id,
        "connection": connection_id,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("NIFI_URL", DEFAULT_URL),
                        help="NiFi base URL (default: $NIFI_URL or %(default)s)")
    parser.add_argument("--input-port", default="from-spark", help="input port name (default %(default)s)")
    parser.add_argument("--output-port", default="to-spark", help="output port name (default %(default)s)")
    parser.add_argument("--wait", type=float, default=300.0,
                        help="seconds to wait for NiFi to answer (default %(default)s)")
    args = parser.parse_args(argv)
    base = api_base(args.url)
    try:
        wait_for_nifi(base, args.wait)
        ids = setup_flow(base, args.input_port, args.output_port)
    except (SetupError, KeyError, TypeError, ValueError) as exc:
        print(f"setup_flow: {exc}", file=sys.stderr)
        return 1
    print(f"input port  {args.input_port}: {ids['input_port']}")
    print(f"output port {args.output_port}: {ids['output_port']}")
    print(f"connection {ids['connection']} in root group {ids['root_group']}; ports started")
    return 0


if __name__ == "__main__":
    sys.exit(main())
