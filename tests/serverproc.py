"""Test harness: run the reference server (``python -m pyspark_s2s.server``) and drive its admin API.

Usage::

    from serverproc import ServerProcess   # tests/ is on sys.path (tests/conftest.py lives there)

    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out") as srv:
        srv.urls                 # ["http://127.0.0.1:40123/nifi"] (one per node, node 0 first)
        srv.url                  # srv.urls[0]
        srv.port_id("in")        # the port's id (from the admin status)
        srv.admin.queued("out")  # FlowFiles queued on port "out" summed over nodes (or node=k)
        srv.admin.enqueue("out", count=3, size=10)
        srv.admin.flowfiles("in", drain=True)   # [{"attributes", "size", "sha256", "content"(bytes)}]

``ServerProcess(*args, tls=False, nodes=None, startup_timeout=30.0, env=None)``
    Starts the server as a subprocess with ``--port 0`` added (unless ``--port`` is in args),
    waits (bounded) for one ``s2s: node <k> listening on <url>`` line per node (``--nodes N``,
    default 1) and raises :class:`ServerStartError` with the server's stderr on failure.
    ``tls=True`` adds ``--tls <tmpdir>`` (``tls="/some/dir"`` uses that directory); then
    ``.tls_dir`` (Path), ``.ca`` (path of ca.pem, for ``verify=``), ``.client_cert`` and
    ``.denied_cert`` (``(cert.pem, key.pem)`` tuples for ``requests``' ``cert=``),
    ``.client_p12`` / ``.client_p12_password`` are set. On exit: SIGTERM, wait up to 10 s,
    then SIGKILL. ``.stop()`` does the same and returns the exit status; ``.kill()`` simulates
    a crash (SIGKILL right away; use it with ``--data-dir``); ``.proc`` is the
    Popen; ``.stderr_text()`` returns what it logged. ``.pid`` is the server's pid (for
    /proc checks). Also usable without ``with``: ``.start()`` / ``.stop()``.

``ServerThread(*args, tls=False)``
    Same interface, but the server runs inside the test process (real sockets, faster to
    start; no SIGTERM behaviour).

``AdminClient(urls, verify=None, cert=None)`` (``.admin`` on both; it lives in
``pyspark_s2s.server.adminclient`` so the benchmarks and ``faults/`` use it too)
    Talks JSON to ``/s2s-admin`` on the first reachable node URL (fails over when a node is
    stopped/removed). Methods (``node=None`` means: every node for stop/start/capacity, the
    node that answers the admin request -- node 0 while it is alive -- for enqueue/flowfiles):

    * ``status()`` -> dict ; ``nodes()`` -> list of node dicts
    * ``port(name, node=0)`` -> port dict ; ``queued(port, node=None)`` -> int
    * ``enqueue(port, flowfiles=None, *, count=None, size=0, attributes=None, node=None)``
      -- ``flowfiles`` is a list of ``(attributes, content_bytes)`` tuples or dicts
      ``{"attributes":..., "content": bytes}``
    * ``flowfiles(port, node=None, drain=False, content=True)`` -> list of dicts with
      ``attributes``, ``size``, ``sha256`` and ``content`` (bytes; absent if content=False)
    * ``stop_port(port, node=None)``, ``start_port(port, node=None)``,
      ``set_capacity(port, capacity, node=None)``
    * ``add_node(port=None)`` -> {"index", "url"}, ``remove_node(k)``, ``stop_node(k)``,
      ``start_node(k)``
    * ``fault(kind, *, node=None, method=None, path_contains=None, count=1, **params)``
      (params: status, seconds, after_packets, after_bytes), ``faults()``, ``clear_faults()``
    * ``expire(tx_id)``, ``transactions(node=None)`` -> list, ``transaction(tx_id)`` -> dict
    * ``reset()``
    Errors raise :class:`AdminError` (``.status``, ``.body``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark_s2s.server.adminclient import AdminClient, AdminError
from pyspark_s2s.server.process import ServerStartError, ServerSubprocess, node_count

__all__ = ["AdminClient", "AdminError", "ServerProcess", "ServerStartError", "ServerThread", "server_fixtures"]

REPO = Path(__file__).resolve().parents[1]


class _Base:
    urls: list[str]
    tls_dir: Path | None
    admin: AdminClient

    def _setup_tls(self, tls: bool | str | os.PathLike[str], args: list[str]) -> list[str]:
        self.tls_dir = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if not tls:
            return args
        if tls is True:
            self._tmp = tempfile.TemporaryDirectory(prefix="s2s-tls-")
            self.tls_dir = Path(self._tmp.name)
        else:
            self.tls_dir = Path(tls)
        return [*args, "--tls", str(self.tls_dir)]

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def ca(self) -> Path | None:
        return None if self.tls_dir is None else self.tls_dir / "ca.pem"

    @property
    def client_cert(self) -> tuple[str, str] | None:
        if self.tls_dir is None:
            return None
        return (str(self.tls_dir / "client.pem"), str(self.tls_dir / "client.key"))

    @property
    def denied_cert(self) -> tuple[str, str] | None:
        if self.tls_dir is None:
            return None
        return (str(self.tls_dir / "denied.pem"), str(self.tls_dir / "denied.key"))

    @property
    def client_p12(self) -> Path | None:
        return None if self.tls_dir is None else self.tls_dir / "client.p12"

    @property
    def client_p12_password(self) -> str | None:
        if self.tls_dir is None:
            return None
        return (self.tls_dir / "client.p12.password").read_text().strip()

    def _make_admin(self) -> None:
        self.admin = AdminClient(self.urls, verify=self.ca, cert=self.client_cert)

    def port_id(self, name: str, node: int = 0) -> str:
        return str(self.admin.port(name, node)["id"])

    def api(self, node: int = 0) -> str:
        """The node's API base URL (``.../nifi-api``)."""
        return self.urls[node] + "-api"

    def _cleanup_tls(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class ServerProcess(_Base):
    """The reference server as a subprocess (see the module docstring)."""

    def __init__(
        self,
        *args: str,
        tls: bool | str | os.PathLike[str] = False,
        nodes: int | None = None,
        startup_timeout: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> None:
        argv = [str(a) for a in args]
        if "--port" not in argv and not any(a.startswith("--port=") for a in argv):
            argv = ["--port", "0", *argv]
        if nodes is not None:
            argv = [*argv, "--nodes", str(nodes)]
        self.nodes = node_count(argv)
        self.argv = self._setup_tls(tls, argv)
        self.startup_timeout = startup_timeout
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.urls = []
        self.lines: list[str] = []
        self._stderr_file: Any = None
        self._stderr_saved = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr_text(self) -> str:
        if self._stderr_file is None:
            return self._stderr_saved
        self._stderr_file.flush()
        self._stderr_file.seek(0)
        return self._stderr_file.read().decode("utf-8", "replace")

    def start(self) -> ServerProcess:
        env = dict(os.environ if self.env is None else self.env)
        self._stderr_file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._child = ServerSubprocess(
            self.argv,
            startup_timeout=self.startup_timeout,
            env=env,
            stderr=self._stderr_file,
            cwd=str(REPO),
            describe_failure=self.stderr_text,
        )
        try:
            self._child.start()
        except ServerStartError:
            self.proc = self._child.proc
            self.stop()  # closes the stderr file and the TLS directory too
            raise
        self.proc = self._child.proc
        self.lines = self._child.lines
        self.urls = list(self._child.urls)
        self._make_admin()
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        self._child.stop(timeout)
        if self._stderr_file is not None:
            self._stderr_saved = self.stderr_text()
            self._stderr_file.close()
            self._stderr_file = None
        code = self.proc.returncode
        self._cleanup_tls()
        return code

    def kill(self) -> int | None:
        """SIGKILL (a crash: no clean shutdown), then clean up like :meth:`stop`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        return self.stop()

    def __enter__(self) -> ServerProcess:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerThread(_Base):
    """The reference server inside the test process (real sockets on 127.0.0.1)."""

    def __init__(self, *args: str, tls: bool | str | os.PathLike[str] = False, nodes: int | None = None) -> None:
        argv = [str(a) for a in args]
        if "--port" not in argv and not any(a.startswith("--port=") for a in argv):
            argv = ["--port", "0", *argv]
        if nodes is not None:
            argv = [*argv, "--nodes", str(nodes)]
        self.argv = self._setup_tls(tls, argv)
        self.urls = []
        self.app: Any = None

    def start(self) -> ServerThread:
        import argparse
        import contextlib
        import io

        from pyspark_s2s.server.cli import add_arguments, build_app

        parser = argparse.ArgumentParser(prog="s2s serve")
        add_arguments(parser)
        args = parser.parse_args(self.argv)
        with contextlib.redirect_stdout(io.StringIO()):
            self.app, _ = build_app(args)
        nodes = self.app.start(args.nodes)
        self.urls = [n.url for n in nodes]
        self._make_admin()
        return self

    def stop(self) -> None:
        if self.app is not None:
            self.app.close()
            self.app = None
        self._cleanup_tls()

    def __enter__(self) -> ServerThread:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_fixtures(*port_args: str) -> tuple[Any, Any, Any, Any]:
    """pytest fixtures ``server``, ``srv``, ``tls_server``, ``tls_srv`` for a conftest: a plain and
    a TLS server subprocess with ``port_args``, shared per module, reset before every test.

    Use: ``server, srv, tls_server, tls_srv = server_fixtures(*PORT_ARGS)``.
    """
    import pytest

    @pytest.fixture(scope="module")
    def server() -> Iterator[ServerProcess]:
        with ServerProcess(*port_args) as proc:
            yield proc

    @pytest.fixture
    def srv(server: ServerProcess) -> Iterator[ServerProcess]:
        server.admin.reset()
        yield server

    @pytest.fixture(scope="module")
    def tls_server() -> Iterator[ServerProcess]:
        with ServerProcess(*port_args, tls=True) as proc:
            yield proc

    @pytest.fixture
    def tls_srv(tls_server: ServerProcess) -> Iterator[ServerProcess]:
        tls_server.admin.reset()
        yield tls_server

    return server, srv, tls_server, tls_srv
