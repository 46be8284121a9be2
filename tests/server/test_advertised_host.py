"""What a node gives out about itself apart from where it listens (NiFi's ``nifi.remote.input.host``,
port forwarding), turning HTTP Site-to-Site off, and ``GET /flow/current-user``; and the client
against advertised names it can only reach through ``peerAddressMap``.

Every test runs the real ``s2s serve`` process. Advertised names are under ``.invalid`` (RFC 6761:
they never resolve), so nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pytest
import requests
from serverproc import ServerProcess

from pyspark_s2s import cli
from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.errors import NoPeerAvailableError

V1 = {"x-nifi-site-to-site-protocol-version": "1", "Accept": "application/json"}
PORTS = ("--input-port", "in", "--output-port", "out", "--route", "in=out")


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _raw_ports(srv: ServerProcess) -> list[int]:
    """Where each node's RAW listener really is (the admin API; the site details give out the
    advertised port)."""
    return [int(n["rawPort"]) for n in srv.admin.nodes()]


def _site(url: str) -> dict:
    resp = requests.get(url + "-api/site-to-site", headers=V1, timeout=10)
    assert resp.status_code == 200
    return resp.json()["controller"]


def _s2s(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(list(args))
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerProcess]:
    """Two nodes with RAW, advertised as nifi-<k>.nifi.svc.invalid (node 1: other.invalid), HTTP
    ports 18080/18081 given out for node 0 and 1's own, RAW port 19000 given out for node 0."""
    args = (*PORTS, "--nodes", "2", "--raw-port", "0",
            "--advertised-host", "nifi-{k}.nifi.svc.invalid", "--advertised-host", "1=other.invalid",
            "--advertised-port", "0=18080", "--advertised-raw-port", "0=19000")
    with ServerProcess(*args) as srv:
        yield srv


@pytest.fixture(scope="module")
def mapped() -> Iterator[ServerProcess]:
    """Two nodes with RAW advertised under names that do not resolve, their own ports."""
    with ServerProcess(*PORTS, "--nodes", "2", "--raw-port", "0",
                       "--advertised-host", "nifi-{k}.nifi.svc.invalid") as srv:
        yield srv


def test_peer_lists_and_site_details_give_out_the_advertised_names_and_ports(cluster: ServerProcess) -> None:
    http0, http1 = (_port(u) for u in cluster.urls)
    _raw0, raw1 = _raw_ports(cluster)
    assert "s2s: node 0 advertises host nifi-0.nifi.svc.invalid, HTTP port 18080, RAW port 19000" in cluster.lines
    assert [n["advertised"] for n in cluster.admin.nodes()] == [
        {"host": "nifi-0.nifi.svc.invalid", "port": 18080, "rawPort": 19000},
        {"host": "other.invalid", "port": http1, "rawPort": raw1},
    ]
    site0, site1 = _site(cluster.urls[0]), _site(cluster.urls[1])
    assert (site0["remoteSiteHttpListeningPort"], site0["remoteSiteListeningPort"]) == (18080, 19000)
    assert (site1["remoteSiteHttpListeningPort"], site1["remoteSiteListeningPort"]) == (http1, raw1)
    # without the version header NiFi drops the HTTP port (pre-1.0 clients), the RAW port stays
    bare = requests.get(cluster.urls[0] + "-api/site-to-site", timeout=10).json()["controller"]
    assert "remoteSiteHttpListeningPort" not in bare and bare["remoteSiteListeningPort"] == 19000
    peers = requests.get(cluster.urls[1] + "-api/site-to-site/peers", headers=V1, timeout=10).json()["peers"]
    assert [(p["hostname"], p["port"]) for p in peers] == [("nifi-0.nifi.svc.invalid", 18080),
                                                            ("other.invalid", http1)]
    # the RAW peer list, asked of node 1's RAW listener (node 1 gives out its own RAW port)
    status, out, err = _s2s("peers", "--url", cluster.urls[1], "--transport", "RAW", "--timeout", "5")
    assert status == 0, err
    assert [line.split()[:2] for line in out.splitlines()[1:3]] == [["nifi-0.nifi.svc.invalid", "19000"],
                                                                   ["other.invalid", str(raw1)]]
    # where the nodes really listen is unchanged: the ready lines and the admin API
    assert [n["url"] for n in cluster.admin.nodes()] == cluster.urls
    assert http0 != 18080 or http1 != 18081


def _peer_map(srv: ServerProcess, raw: bool) -> str:
    ports = _raw_ports(srv) if raw else [_port(u) for u in srv.urls]
    return ",".join(f"nifi-{k}.nifi.svc.invalid:{p}=127.0.0.1:{p}" for k, p in enumerate(ports))


@pytest.mark.parametrize("transport", ["HTTP", "RAW"])
def test_client_reaches_advertised_names_only_through_peer_address_map(
    mapped: ServerProcess, transport: str, tmp_path
) -> None:
    mapped.admin.reset()
    raw = transport == "RAW"
    status, out, _err = _s2s("peers", "--url", mapped.url, "--transport", transport, "--timeout", "5")
    assert status == 0
    ports = _raw_ports(mapped) if raw else [_port(u) for u in mapped.urls]
    for k, port in enumerate(ports):
        assert any(line.split()[:2] == [f"nifi-{k}.nifi.svc.invalid", str(port)] for line in out.splitlines()), out
    # without a mapping no advertised peer can be reached: every attempt names the name that
    # does not resolve
    with (
        SiteToSiteClient(url=mapped.url, portName="in", transportProtocol=transport, timeout=5) as client,
        pytest.raises(NoPeerAvailableError) as failed,
    ):
        client.send([b"unreachable"])
    assert "nifi-0.nifi.svc.invalid" in str(failed.value) and "nifi-1.nifi.svc.invalid" in str(failed.value)
    assert mapped.admin.queued("out") == 0
    # with peerAddressMap the same names work: the command line and the library, both ways
    f = tmp_path / "one.txt"
    f.write_bytes(b"mapped")
    status, out, err = _s2s("send", "--url", mapped.url, "--port-name", "in", "--transport", transport,
                            "--peer-map", _peer_map(mapped, raw), "--timeout", "5", str(f))
    assert status == 0, err
    assert ("nifi://nifi-" if raw else "http://nifi-") in out
    with SiteToSiteClient(url=mapped.url, portName="in", transportProtocol=transport, timeout=5,
                          peerAddressMap=_peer_map(mapped, raw)) as client:
        client.send([b"library"])
    assert mapped.admin.queued("out") == 2
    # `s2s receive` drains the cluster (it asks for the peer list again after an empty transaction)
    status, out, err = _s2s("receive", "--url", mapped.url, "--port-name", "out", "--transport", transport,
                            "--peer-map", _peer_map(mapped, raw), "--timeout", "5", "--out", str(tmp_path / "got"))
    assert status == 0, err
    got = sorted(p.read_bytes() for p in (tmp_path / "got").iterdir() if not p.name.endswith(".attributes.json"))
    assert got == [b"library", b"mapped"]
    assert mapped.admin.queued("out") == 0


def test_http_site_to_site_off_answers_as_nifi_does() -> None:
    with ServerProcess(*PORTS, "--no-http-site-to-site") as srv:
        assert "s2s: HTTP Site-to-Site is off (--no-http-site-to-site); no --raw-port either: Site-to-Site is off" \
            in srv.lines
        site = _site(srv.url)
        assert "remoteSiteHttpListeningPort" not in site and "remoteSiteListeningPort" not in site
        assert [p["name"] for p in site["inputPorts"]] == ["in"]  # the ports are still listed
        for method, path in (("GET", "/site-to-site/peers"),
                             ("POST", f"/data-transfer/input-ports/{srv.port_id('in')}/transactions")):
            resp = requests.request(method, srv.url + "-api" + path, headers=V1, timeout=10)
            assert (resp.status_code, resp.headers["Content-Type"], resp.text) == (
                403, "text/plain", "HTTP(S) Site-to-Site is not enabled on this host.")
            assert "no-cache" in resp.headers["Cache-Control"]
        # the wrong port type is still a 404 first (NiFi checks it before anything else)
        resp = requests.post(srv.url + "-api/data-transfer/other-ports/x/transactions", headers=V1, timeout=10)
        assert resp.status_code == 404


def test_raw_stays_on_when_http_site_to_site_is_off() -> None:
    with ServerProcess(*PORTS, "--no-http-site-to-site", "--raw-port", "0") as srv:
        site = _site(srv.url)
        assert "remoteSiteHttpListeningPort" not in site and site["remoteSiteListeningPort"] == _raw_ports(srv)[0]
        with SiteToSiteClient(url=srv.url, portName="in", transportProtocol="RAW", timeout=5) as client:
            client.send([b"over RAW"])
        assert srv.admin.queued("out") == 1
        with (
            SiteToSiteClient(url=srv.url, portName="in", timeout=5) as client,
            pytest.raises(Exception, match="not configured to allow HTTP site-to-site"),
        ):
            client.send([b"over HTTP"])


def test_current_user_names_the_identity_the_server_took() -> None:
    with ServerProcess(*PORTS, tls=True) as srv:
        url = srv.url + "-api/flow/current-user"
        resp = requests.get(url, cert=srv.client_cert, verify=str(srv.ca), timeout=10)
        assert resp.status_code == 200
        assert resp.json() == {"identity": "CN=s2s-client, OU=pyspark-s2s", "anonymous": False}
        assert requests.get(url, cert=srv.denied_cert, verify=str(srv.ca), timeout=10).status_code == 403
        assert requests.get(url, verify=str(srv.ca), timeout=10).status_code == 401
    with ServerProcess(*PORTS) as srv:
        resp = requests.get(srv.url + "-api/flow/current-user", timeout=10)
        assert resp.json() == {"identity": "anonymous", "anonymous": True}


def _serve_usage(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = cli.main(["serve", "--port", "0", *args])
        except SystemExit as exc:  # argparse's own usage errors
            status = exc.code if isinstance(exc.code, int) else 1
    return status, err.getvalue()


@pytest.mark.parametrize(
    "args,says",
    [
        (["--advertised-host", "a/b"], "argument --advertised-host: expected a host name"),
        (["--advertised-host", "x", "--advertised-host", "y"], "--advertised-host given twice"),
        (["--advertised-host", "2=x", "--nodes", "2"], "--advertised-host 2=x: there is no node 2 (--nodes 2)"),
        (["--advertised-port", "0"], "argument --advertised-port: expected a TCP port number 1-65535"),
        (["--advertised-port", "65535", "--nodes", "2"], "node 1 would give out port 65536"),
        (["--advertised-raw-port", "9000"], "--advertised-raw-port needs --raw-port"),
    ],
)
def test_bad_advertised_options_are_usage_errors(args: list[str], says: str) -> None:
    status, err = _serve_usage(*args)
    last = err.strip().splitlines()[-1]
    assert status == 2 and last.startswith("s2s serve: ") and says in last, err
