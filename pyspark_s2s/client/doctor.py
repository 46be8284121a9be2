"""The ``s2s doctor`` command: what is wrong between this machine and NiFi, one line per check.

Owns: :class:`Doctor`, the checks in order, each reported as it is made (``OK``/``FAIL``/``SKIP``,
the check, what was found and, for a problem, the fix), and the ``doctor`` subcommand:

1. ``url``: each URL's host resolves and its port accepts a connection (through the proxy when
   one is set; ``peerAddressMap`` applies);
2. ``tls`` (``https://`` URLs): the handshake, the server's certificate (who issued it, the names
   it holds, whether the chain and the host name verify), the client certificate presented;
3. ``access``: ``GET /site-to-site`` answers, with the identity the server took the client for
   (``GET /flow/current-user``) and 401/403 explained;
4. ``site-to-site``: enabled, on which transports (``remoteSiteHttpListeningPort``,
   ``remoteSiteListeningPort``), secure or not;
5. ``ports``: the ports this identity can see with their state; ``port NAME`` for each
   ``--port-name``: input or output, running, and a handshake on it (a transaction created and
   canceled at once: no data moves);
6. ``peers``: the peer list (HTTP, and RAW when RAW is on), every advertised host and port tried
   from here; an advertised host that does not resolve or answer is named as NiFi's
   ``nifi.remote.input.host`` problem with a ``peerAddressMap`` that works from here;
7. ``spark`` (``--spark``): run in a child process, ``python -m pyspark_s2s.spark.doctor``
   (started by name: this module never imports the Spark layer or pyspark).

Exit status 0 when no check failed, 1 otherwise, 2 for a usage error.

How an address is reached (TCP, the proxy tunnel, TLS, certificates) is
:mod:`~pyspark_s2s.client.doctor_net`'s; the report's lines (:class:`Check`) and the words for
each failure and its fix are :mod:`~pyspark_s2s.client.doctor_report`'s; the Spark child is
started by :mod:`~pyspark_s2s.client.doctor_spark`. This module keeps the checks, in the order
they print, and the ``doctor`` subcommand.

Must not import: the server, the Spark layer, pyspark. Secrets (keystore, truststore and proxy
passwords) are handed to the client and to the Spark child on stdin, never printed or put on a
command line.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from pyspark_s2s.cli import one_line
from pyspark_s2s.client import doctor_report as advice
from pyspark_s2s.client.cli_options import (
    add_connection_options,
    client_options,
    counted,
    flag_message,
    in_flags,
    run_command,
)
from pyspark_s2s.client.doctor_net import (
    Dialer,
    NoAnswer,
    client_dn,
    describe_cert,
    display_url,
    hostport,
    tcp,
    url_parts,
)
from pyspark_s2s.client.doctor_report import Check
from pyspark_s2s.client.doctor_spark import run_spark_child
from pyspark_s2s.errors import CommandError, UsageError

__all__ = ["Check", "Doctor", "doctor", "register"]

logger = logging.getLogger(__name__)

#: the doctor's connect/read timeout when ``--timeout`` is not given (the client's default, 30 s,
#: is long to wait for every dead address of a check)
DEFAULT_TIMEOUT = "5 sec"


class Doctor:
    """Runs the checks against one configuration and reports each as it is made.

    ``config`` is a :class:`~pyspark_s2s.client.SiteToSiteClientConfig`; ``options`` the NiFi-named
    options it was built from (handed to the Spark child); ``shown_urls`` the URLs as the user
    typed them, in the config's order.
    """

    def __init__(self, config: Any, *, options: dict[str, Any], port_names: list[str],
                 spark: bool = False, shown_urls: list[str] | None = None,
                 report: Callable[[Check], None] | None = None) -> None:
        from pyspark_s2s.client.http import HttpTransport

        self.config = config
        self.options = options
        self.port_names = port_names
        self.spark = spark
        self.shown_urls = shown_urls or [display_url(u) for u in config.urls]
        self.report = report or (lambda check: None)
        self.checks: list[Check] = []
        self.timeout = float(config.timeout)
        self.transport = HttpTransport(config)
        self.net = Dialer(config, self.timeout)  #: connections as the client makes them
        self.client_dn = client_dn(config)
        self.identity: str | None = None
        self.site: Any = None  #: the SiteInfo of the first URL that answered

    # -- reporting ---------------------------------------------------------------------------
    def _add(self, status: str, name: str, text: str) -> Check:
        check = Check(status, name, text)
        self.checks.append(check)
        self.report(check)
        return check

    def ok(self, name: str, text: str) -> None:
        self._add("OK", name, text)

    def fail(self, name: str, text: str) -> None:
        self._add("FAIL", name, text)

    def skip(self, name: str, text: str) -> None:
        self._add("SKIP", name, text)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks)

    def headers(self) -> dict[str, str]:
        """The version and handshake headers the client sends on every request (§1.1)."""
        from pyspark_s2s.protocol.negotiation import handshake_headers

        cfg = self.config
        headers = dict(handshake_headers(cfg.use_compression, int(cfg.idle_expiration * 1000), cfg.batch_count,
                                         cfg.batch_size, int(cfg.batch_duration * 1000), version=1))
        headers["Accept"] = "application/json"
        return headers

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> list[Check]:
        try:
            self._run()
        finally:
            self.transport.close()
        return self.checks

    def _run(self) -> None:
        answering = []
        for api_url, shown in zip(self.config.urls, self.shown_urls, strict=True):
            if self.check_url(api_url, shown) and self.check_tls(api_url, shown):
                answering.append((api_url, shown))
        if not answering:
            self.skip("site-to-site, ports, peers", "not run: no URL passed the checks above")
            self._skip_spark("no URL answered")
            return
        self.check_access(answering)
        if self.site is None:
            self.skip("site-to-site, ports, peers", "not run: they need the site details (GET /site-to-site)")
            self._skip_spark("the site details could not be read")
            return
        usable = self.check_site_to_site()
        self.check_ports(usable)
        if self.site.http_port is None and self.site.raw_port is None:
            self.skip("peers", "Site-to-Site is off (above): no peer list to ask for")
        else:
            self.check_peers()
        if self.spark:
            self.check_spark()

    def _skip_spark(self, why: str) -> None:
        if self.spark:
            self.skip("spark", f"not run: {why}")

    # -- 1. the URLs answer --------------------------------------------------------------------
    def connect(self, host: str, port: int, timeout: float | None = None, *, proxied: bool = True) -> socket.socket:
        """A TCP connection to the advertised ``host:port`` as the client makes it (see
        :meth:`Dialer.connect <pyspark_s2s.client.doctor_net.Dialer.connect>`)."""
        return self.net.connect(host, port, timeout, proxied=proxied)

    def check_url(self, api_url: str, shown: str) -> bool:
        scheme, host, port = url_parts(api_url)
        name = f"url {shown}"
        try:
            sock = self.connect(host, port)
        except NoAnswer as exc:
            self.fail(name, self._no_answer(exc, host, port, scheme))
            return False
        sock.close()
        self.ok(name, f"{self.net.where(host, port)} accepts connections")
        return True

    def _no_answer(self, exc: NoAnswer, host: str, port: int, scheme: str) -> str:
        return advice.no_answer(exc, host, port, scheme, self.net.where(host, port), self.timeout)

    # -- 2. TLS --------------------------------------------------------------------------------
    def check_tls(self, api_url: str, shown: str) -> bool:
        scheme, host, port = url_parts(api_url)
        if scheme != "https":
            return True
        name = f"tls {shown}"
        from pyspark_s2s.errors import ConfigError

        try:
            ctx = self.transport.ssl_context
        except ConfigError as exc:
            self.fail(name, f"the client's TLS material cannot be used: {flag_message(exc)}")
            return False
        try:
            version, der = self.net.handshake(ctx, host, port)
        except ssl.SSLCertVerificationError as exc:
            self.fail(name, advice.verify_failure(exc, self.net.unverified_cert(host, port), host, port,
                                                  self.config.truststore_filename))
            return False
        except ssl.SSLError as exc:
            self.fail(name, advice.tls_failure(exc))
            return False
        except NoAnswer as exc:
            self.fail(name, f"the TLS handshake did not happen: {self._no_answer(exc, host, port, scheme)}")
            return False
        except OSError as exc:
            self.fail(name, f"the TLS handshake broke off: {exc}: is {port} a TLS port (nifi.web.https.port)?")
            return False
        cert = describe_cert(der)
        trust = f"--truststore {self.config.truststore_filename}" if self.config.truststore_filename else "the system's CAs"
        presented = (f"client certificate {self.client_dn} presented" if self.client_dn
                     else "no client certificate given (--keystore)")
        self.ok(name, f"{version}; certificate {cert.subject} for {cert.names_text}, issued by {cert.issuer}, "
                      f"valid until {cert.not_after:%Y-%m-%d}; chain trusted through {trust}; host name {host} "
                      f"matches; {presented}")
        return True

    # -- 3. access: GET /site-to-site ----------------------------------------------------------
    def check_access(self, urls: list[tuple[str, str]]) -> None:
        from pyspark_s2s.client.siteinfo import parse_site_info
        from pyspark_s2s.errors import S2SError
        from pyspark_s2s.protocol.endpoints import site_info_path

        answered: list[str] = []
        for api_url, shown in urls:
            what = f"GET {api_url}{site_info_path()}"
            try:
                resp = self.transport.request("GET", api_url + site_info_path(), headers=self.headers())
                if resp.status == 200:
                    info = parse_site_info(resp, api_url)
                    if self.site is None:
                        self.site = info
                    answered.append(shown)
                    continue
            except S2SError as exc:
                said = advice.transport_advice(exc, self.client_dn)
                self.fail("access", said if said.startswith(what) else f"{what} failed: {said}")
                continue
            self.fail("access", advice.refusal(what, resp.status, resp.text, self.client_dn))
        if not answered:
            return
        where = " and ".join(answered)
        scheme = url_parts(self.config.urls[0])[0]
        if scheme != "https":
            self.ok("access", f"GET /site-to-site answers at {where}; plain HTTP: NiFi does not authenticate "
                              "Site-to-Site clients (anonymous)")
            return
        self.identity = self._current_user()
        if self.identity is not None:
            self.ok("access", f"the server takes this client for {self.identity!r} (GET /flow/current-user) and "
                              f"lets it read the site-to-site details at {where}")
        else:
            self.identity = self.client_dn
            self.ok("access", f"the site-to-site details are readable at {where} with client certificate "
                              f"{self.client_dn} (the server did not say which identity it took it for: "
                              "GET /flow/current-user is refused; NiFi maps a DN through "
                              "nifi.security.identity.mapping.*)")

    def _current_user(self) -> str | None:
        from pyspark_s2s.errors import S2SError

        url = self.config.urls[0] + "/flow/current-user"
        try:
            resp = self.transport.request("GET", url, headers=self.headers())
            body = json.loads(resp.body.decode("utf-8")) if resp.status == 200 else None
        except (S2SError, ValueError, UnicodeDecodeError):
            return None
        identity = body.get("identity") if isinstance(body, dict) else None
        return identity if isinstance(identity, str) else None

    # -- 4. Site-to-Site enabled ---------------------------------------------------------------
    def check_site_to_site(self) -> bool:
        """Returns whether the configured transport can be used (the peers are checked then)."""
        info = self.site
        raw_wanted = self.config.transport_protocol == "RAW"
        if info.secure is None:
            self.fail("site-to-site", "the site details carry no siteToSiteSecure: NiFi is not configured to "
                                      "accept Site-to-Site (nifi.remote.input.* in nifi.properties)")
            return False
        if info.http_port is None and info.raw_port is None:
            self.fail("site-to-site", "not enabled: the site details name no HTTP port (remoteSiteHttpListeningPort) "
                                      "and no RAW port (remoteSiteListeningPort): in nifi.properties set "
                                      "nifi.remote.input.http.enabled=true (HTTP) and/or nifi.remote.input.socket.port "
                                      "(RAW), then restart NiFi")
            return False
        secure = "secure" if info.secure else "not secure"
        parts = [f"enabled ({secure})"]
        if info.http_port is not None:
            boot = info.bootstrap_peer()
            parts.append(f"HTTP on {'https' if boot.secure else 'http'}://{hostport(boot.hostname, boot.port)}/nifi")
        else:
            parts.append("HTTP off (nifi.remote.input.http.enabled is not true)")
        parts.append(f"RAW on port {info.raw_port}" if info.raw_port is not None
                     else "RAW off (nifi.remote.input.socket.port is not set)")
        text = "; ".join(parts)
        if raw_wanted and info.raw_port is None:
            self.fail("site-to-site", f"{text}: --transport RAW needs RAW Site-to-Site: use HTTP (leave out "
                                      "--transport) or set nifi.remote.input.socket.port in nifi.properties")
            return False
        if not raw_wanted and info.http_port is None:
            self.fail("site-to-site", f"{text}: the client speaks HTTP by default: use --transport RAW "
                                      "(transportProtocol=RAW), or set nifi.remote.input.http.enabled=true")
            return False
        self.ok("site-to-site", text)
        return True

    # -- 5. ports ------------------------------------------------------------------------------
    def check_ports(self, usable: bool = True) -> None:
        info = self.site
        inputs, outputs = info.input_ports, info.output_ports

        def listed(ports: Any) -> str:
            return ", ".join(f"{p.name} ({p.state or 'state unknown'})" for p in ports) or "none"

        seen = f" to {self.identity!r}" if self.identity else ""
        text = f"input ports: {listed(inputs)}; output ports: {listed(outputs)}"
        if not inputs and not outputs:
            why = ("the flow has no public port, or this identity has no Site-to-Site policy on any "
                   "('receive data via site-to-site' on an input port, 'send data via site-to-site' on an output "
                   "port)") if info.secure else "the flow has no public port (a port that allows remote access)"
            self.fail("ports", f"no input or output port is visible{seen}: {why}")
        else:
            self.ok("ports", f"visible{seen}: {text}")
        for name in self.port_names:
            self.check_port(name, usable)

    def check_port(self, name: str, usable: bool = True) -> None:
        from pyspark_s2s.protocol.codes import Direction

        info = self.site
        found = [(Direction.SEND, p) for p in info.input_ports if p.name == name]
        found += [(Direction.RECEIVE, p) for p in info.output_ports if p.name == name]
        label = f"port {name}"
        if not found:
            names = [p.name for p in (*info.input_ports, *info.output_ports)]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            why = (" On a secured NiFi a port is listed only for identities with its Site-to-Site policy ('receive "
                   "data via site-to-site' on an input port, 'send data via site-to-site' on an output port).")
            self.fail(label, f"no input or output port of that name is visible{hint}; input ports: "
                             f"{', '.join(p.name for p in info.input_ports) or 'none'}; output ports: "
                             f"{', '.join(p.name for p in info.output_ports) or 'none'}. Names are case-sensitive."
                             + (why if info.secure else ""))
            return
        for direction, port in found:
            kind = "input port (this client sends to it)" if direction is Direction.SEND else \
                "output port (this client receives from it)"
            state = port.state or "state unknown"
            if port.state is not None and port.state != "RUNNING":
                self.fail(label, f"{kind}, {state}: start it in NiFi (until then every transaction is refused: "
                                 "503, PORT_NOT_IN_VALID_STATE)")
                continue
            how = "RAW" if self.config.transport_protocol == "RAW" else "HTTP"
            if not usable:
                self.skip(label, f"{kind}, {state}; no handshake tried: Site-to-Site over {how} is not available "
                                 "(above)")
                continue
            problem = self._probe_port(direction, port)
            if problem is None:
                self.ok(label, f"{kind}, {state}; a handshake over {how} was accepted (a transaction created and "
                               "canceled at once, no data moved)")
            else:
                self.fail(label, f"{kind}, {state}; {problem}")

    def _probe_port(self, direction: Any, port: Any) -> str | None:
        """A transaction created and canceled at once on ``port``: None when accepted, else why not."""
        from pyspark_s2s.errors import S2SError

        try:
            if self.config.transport_protocol == "RAW":
                self._probe_raw(port.id)
            else:
                self._probe_http(direction, port.id)
        except S2SError as exc:
            who = self.identity or self.client_dn or "this client"
            return advice.port_refusal(direction, port.name, exc, who)
        return None

    def _probe_http(self, direction: Any, port_id: str) -> None:
        from pyspark_s2s.client.http_transaction import _result_error
        from pyspark_s2s.protocol.codes import Header, ResponseCode
        from pyspark_s2s.protocol.endpoints import transactions_path
        from pyspark_s2s.protocol.urls import resolve_location

        base = self.site.active_url
        url = base + transactions_path(direction, port_id)
        resp = self.transport.request("POST", url, headers=self.headers())
        if resp.status != 201:
            raise _result_error(resp, resp.body, f"POST {url} (create transaction)", peer=base)
        location = resp.header(Header.LOCATION)
        if location:
            cancel = resolve_location(location, base) + f"?responseCode={int(ResponseCode.CANCEL_TRANSACTION)}"
            self.transport.request("DELETE", cancel, headers=self.headers())

    def _probe_raw(self, port_id: str) -> None:
        from pyspark_s2s.client.raw_connection import raw_bootstrap_peer

        raw = self._raw_transport()
        try:
            conn = raw.checkout(raw_bootstrap_peer(self.site), port_id)
            conn.shutdown()
        finally:
            raw.close()

    def _raw_transport(self) -> Any:
        from pyspark_s2s.client.raw_connection import RawTransport
        from pyspark_s2s.client.siteinfo import SiteInfoProvider

        transport = self.transport
        site = SiteInfoProvider(transport, self.config.urls, float(self.config.cache_expiration), self.headers)
        return RawTransport(self.config, site, ssl_context=lambda: transport.ssl_context)

    # -- 6. peers ------------------------------------------------------------------------------
    def check_peers(self) -> None:
        info = self.site
        if info.http_port is not None:
            self._http_peers()
        if info.raw_port is not None:
            self._raw_peers()

    def _http_peers(self) -> None:
        from pyspark_s2s.errors import S2SError
        from pyspark_s2s.protocol.endpoints import peers_path
        from pyspark_s2s.protocol.peers import peers_from_response

        boot = self.site.bootstrap_peer()
        url = boot.api_url + peers_path()
        asked = hostport(boot.hostname, boot.port)
        try:
            resp = self.transport.request("GET", url, headers=self.headers())
            if resp.status != 200:
                self.fail("peers", f"GET {url} answered HTTP {resp.status}: {one_line(resp.text)[:200]}")
                return
            peers = peers_from_response(json.loads(resp.body.decode("utf-8")))
        except S2SError as exc:
            hint = advice.forwarding_hint(boot.port, self.site.active_url)
            self.fail("peers", f"GET {url} failed: {in_flags(exc.message)}{hint}")
            return
        except (ValueError, UnicodeDecodeError) as exc:
            self.fail("peers", f"GET {url} did not answer a peer list: {exc}")
            return
        self._peer_lines("HTTP", asked, peers)

    def _raw_peers(self) -> None:
        from pyspark_s2s.client.raw_connection import raw_bootstrap_peer, raw_peer_name
        from pyspark_s2s.errors import S2SError

        boot = raw_bootstrap_peer(self.site)
        asked = hostport(boot.hostname, boot.port)
        raw = self._raw_transport()
        try:
            peers = raw.fetch_peers(boot)
        except S2SError as exc:
            self.fail("peers", f"RAW: REQUEST_PEER_LIST at {raw_peer_name(boot)} failed: {in_flags(exc.message)}")
            return
        finally:
            raw.close()
        self._peer_lines("RAW", asked, peers)

    def _peer_lines(self, kind: str, asked: str, peers: list[Any]) -> None:
        if not peers:
            self.fail("peers", f"{kind}: the peer list of node {asked} is empty: no node can take a transaction "
                               "(are the cluster's nodes connected?)")
            return
        for peer in peers:
            problem = self._peer_problem(kind, asked, peer, len(peers))
            queued = f"{counted(peer.flow_file_count, 'FlowFile')} queued"
            if problem is None:
                secure = "secure, " if peer.secure else ""
                where = self.net.where(peer.hostname, peer.port, proxied=kind != "RAW")
                self.ok("peers", f"{kind}: {where} answers ({secure}{queued})")
            else:
                self.fail("peers", problem)

    def _peer_problem(self, kind: str, asked: str, peer: Any, count: int) -> str | None:
        host, port = peer.hostname, peer.port
        raw = kind == "RAW"
        try:
            sock = self.connect(host, port, proxied=not raw)
        except NoAnswer as exc:
            fix = self._mapping_fix(host, port, count, proxied=not raw)
            return advice.unreachable_peer(exc, asked, host, port, raw=raw,
                                           where=self.net.where(host, port, proxied=not raw), fix=fix)
        try:
            if peer.secure:
                return self._peer_tls_problem(sock, asked, host, port)
            return None
        finally:
            sock.close()

    def _peer_tls_problem(self, sock: socket.socket, asked: str, host: str, port: int) -> str | None:
        try:
            sock.settimeout(self.timeout)
            with self.transport.ssl_context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=True):
                return None
        except ssl.SSLCertVerificationError as exc:
            return advice.peer_cert_problem(exc, asked, host, port)
        except (ssl.SSLError, OSError) as exc:
            return f"peer {hostport(host, port)}: the TLS handshake failed: {exc}"

    def _mapping_fix(self, host: str, port: int, count: int, *, proxied: bool = True) -> str:
        """``set peerAddressMap=adv:port=reachable:port`` with an address that answers from here,
        found among the URL hosts (the advertised port, or the URL's own port for a single node)."""
        candidates: list[tuple[str, int]] = []
        for api_url in self.config.urls:
            _scheme, url_host, url_port = url_parts(api_url)
            reach_host, reach_port = self.config.peer_address_map.map(url_host, url_port)
            candidates.append((reach_host, port))
            if count == 1:
                candidates.append((reach_host, reach_port))
        for candidate in dict.fromkeys(candidates):
            if self.config.proxy_host is not None and proxied:
                break  # what answers the proxy is not for this machine to try
            try:
                tcp(candidate[0], candidate[1], min(self.timeout, 2.0)).close()
            except NoAnswer:
                continue
            entry = f"{hostport(host, port)}={hostport(*candidate)}"
            return f"set peerAddressMap={entry} (--peer-map {entry}; {hostport(*candidate)} answers from here)"
        entry = f"{hostport(host, port)}=REACHABLE-HOST:PORT"
        return f"set peerAddressMap={entry} (--peer-map {entry}) with an address of that node this machine reaches"

    # -- 7. Spark ------------------------------------------------------------------------------
    def check_spark(self) -> None:
        outputs = {p.name for p in self.site.output_ports}
        read_ports = [n for n in self.port_names if n in outputs]
        request = {"options": self.options, "read_ports": read_ports}
        for check in run_spark_child(request):
            self._add(check.status, check.name, check.text)


# -- the command ---------------------------------------------------------------------------------


def doctor(args: argparse.Namespace) -> int:
    from pyspark_s2s.client.config import SiteToSiteClientConfig
    from pyspark_s2s.errors import ConfigError

    opts = client_options(args)
    opts.setdefault("timeout", DEFAULT_TIMEOUT)
    try:
        config = SiteToSiteClientConfig.from_options(opts)
    except ConfigError as exc:
        raise UsageError(flag_message(exc)) from None
    shown = [u.strip() for u in args.url.split(",") if u.strip()]
    if len(shown) != len(config.urls):
        shown = [display_url(u) for u in config.urls]

    def report(check: Check) -> None:
        print(check.line(), flush=True)

    doc = Doctor(config, options=opts, port_names=list(dict.fromkeys(args.port_names or [])), spark=args.spark,
                 shown_urls=shown, report=report)
    try:
        doc.run()
    except ConfigError as exc:  # found only once in use (an unreadable keystore)
        raise CommandError(flag_message(exc)) from None
    return 1 if doc.failed else 0


def register(subparsers: Any) -> None:
    """Add ``doctor`` to the ``s2s`` command."""
    p = subparsers.add_parser(
        "doctor",
        help="check the way to NiFi: URLs, TLS, access, Site-to-Site, ports, peers (and Spark)",
        description="Check, in order, what a Site-to-Site client needs and print one line per check: OK, or "
                    "FAIL with the problem and the fix. Exit status 0 when every check passed, 1 otherwise.",
    )
    add_connection_options(p, port=False)
    p.add_argument("--port-name", action="append", dest="port_names", metavar="NAME",
                   help="a port to check: exists (input or output), running, a handshake is accepted; "
                        "repeatable; with --spark an output port's first FlowFile is shown (and left in NiFi)")
    p.add_argument("--spark", action="store_true",
                   help="also start a local SparkSession: do its Python workers import pyspark_s2s, does "
                        "format('nifi-s2s') resolve, and (with an output --port-name) read one FlowFile "
                        "without taking it")
    p.set_defaults(func=run_command(doctor))
