"""Cluster URL parsing (docs/protocol.md §9, §12 item 27), peer API URLs, Location resolution (§1.4),
peer address mapping."""

from __future__ import annotations

import pytest

from pyspark_s2s.errors import ConfigError
from pyspark_s2s.protocol.urls import (
    PeerAddressMap,
    normalize_cluster_url,
    parse_cluster_urls,
    peer_api_url,
    resolve_location,
)

# NiFi's TestSiteToSiteRestApiClient / ClusterUrlParser resolution table, plus our extras
RESOLVE = [
    ("http://localhost:8080", "http://localhost:8080/nifi-api"),
    ("http://localhost:8080/", "http://localhost:8080/nifi-api"),
    ("http://localhost:8080/nifi", "http://localhost:8080/nifi-api"),
    ("http://localhost:8080/nifi/", "http://localhost:8080/nifi-api"),
    ("http://localhost:8080/nifi-api", "http://localhost:8080/nifi-api"),
    ("http://localhost:8080/nifi-api/", "http://localhost:8080/nifi-api"),
    ("http://localhost/some/path", "http://localhost/some/path/nifi-api"),
    ("http://localhost:8080/some/path/", "http://localhost:8080/some/path/nifi-api"),
    ("http://localhost/some/nifi", "http://localhost/some/nifi-api"),
    ("http://localhost:8080/some/nifi-api/", "http://localhost:8080/some/nifi-api"),
    ("https://nifi.example.com:8443/nifi", "https://nifi.example.com:8443/nifi-api"),
    ("  https://h:8443/nifi  ", "https://h:8443/nifi-api"),
    ("HTTPS://Host:8443/nifi", "https://Host:8443/nifi-api"),
    ("http://h:8080/nifi?x=1#frag", "http://h:8080/nifi-api"),
    ("http://[::1]:8080/nifi", "http://[::1]:8080/nifi-api"),
    ("http://h/mynifi", "http://h/mynifi/nifi-api"),
]


@pytest.mark.parametrize("url,expected", RESOLVE)
def test_normalize(url: str, expected: str) -> None:
    assert normalize_cluster_url(url) == expected
    assert parse_cluster_urls(url) == [expected]


def test_three_urls_keep_order() -> None:
    text = "http://host1:8080/nifi,http://host2:8080/nifi,http://host3:8080/nifi"
    assert parse_cluster_urls(text) == [
        "http://host1:8080/nifi-api",
        "http://host2:8080/nifi-api",
        "http://host3:8080/nifi-api",
    ]


def test_spaces_empty_items_and_duplicates() -> None:
    text = " http://host2:8080/nifi , ,http://host1:8080 ,http://host2:8080/nifi-api/,"
    assert parse_cluster_urls(text) == ["http://host2:8080/nifi-api", "http://host1:8080/nifi-api"]


def test_iterable_input() -> None:
    assert parse_cluster_urls(["https://a:1/nifi", "https://b:2,https://a:1"]) == [
        "https://a:1/nifi-api",
        "https://b:2/nifi-api",
    ]


@pytest.mark.parametrize("text", ["", "   ", ",", [], [" , "]])
def test_no_url(text: str | list[str]) -> None:
    with pytest.raises(ConfigError, match="Cluster URL was not specified") as info:
        parse_cluster_urls(text)
    assert info.value.option == "url"


def test_mixed_schemes() -> None:
    with pytest.raises(ConfigError, match="Different protocols") as info:
        parse_cluster_urls("http://host1:8080/nifi,https://host2:8443/nifi", option="urls")
    assert info.value.option == "urls"


@pytest.mark.parametrize(
    "bad",
    [
        "host&2:8080",
        "localhost:8080",
        "http://",
        "http://:8080/nifi",
        "http://h:port/nifi",
        "http://h:99999/nifi",
        "http://h:80:81/nifi",
        "http://h /nifi",
        "//h:8080/nifi",
        "ftp://h/nifi",
        "file:///tmp/x",
        "http://[]:8080/",
    ],
)
def test_malformed_url_is_named(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_cluster_urls(f"http://host1:8080/nifi,{bad},http://host3:8080/nifi")
    assert repr(bad) in str(info.value)
    assert info.value.option == "url"


def test_non_http_scheme_message() -> None:
    with pytest.raises(ConfigError, match="not http or https"):
        normalize_cluster_url("ftp://h/nifi")


def test_peer_api_url_drops_context_path() -> None:
    assert peer_api_url("nifi-1", 8443, True) == "https://nifi-1:8443/nifi-api"
    assert peer_api_url("localhost", 8080, False) == "http://localhost:8080/nifi-api"
    assert peer_api_url("::1", 8080, False) == "http://[::1]:8080/nifi-api"


def test_resolve_location() -> None:
    base = "http://proxy:9090/ctx/nifi-api"
    absolute = "https://nifi2.example.com:443/nifi-api/data-transfer/input-ports/p/transactions/t"
    assert resolve_location(absolute, base) == absolute
    assert resolve_location("http://h/x", base) == "http://h/x"
    rel = "/data-transfer/output-ports/p/transactions/t"
    assert resolve_location(rel, base) == base + rel
    # NiFi's match is case-sensitive: anything else is appended
    assert resolve_location("HTTP://h/x", base) == base + "HTTP://h/x"


# -- peer address map ---------------------------------------------------------------------------


def test_peer_address_map() -> None:
    amap = PeerAddressMap.parse(
        "nifi-0.nifi:8443=127.0.0.1:18443, nifi-1.nifi:8443=127.0.0.1:18444\n[::1]:8080=localhost:9090"
    )
    assert len(amap) == 3 and amap
    assert amap.map("nifi-0.nifi", 8443) == ("127.0.0.1", 18443)
    assert amap.map("NIFI-1.nifi", 8443) == ("127.0.0.1", 18444)
    assert amap.map("::1", 8080) == ("localhost", 9090)
    assert amap.map("nifi-0.nifi", 8080) == ("nifi-0.nifi", 8080)  # other port: unmapped
    assert amap.map("other", 1) == ("other", 1)
    assert PeerAddressMap.parse(amap.to_text()) == amap
    assert next(iter(amap)) == (("nifi-0.nifi", 8443), ("127.0.0.1", 18443))


@pytest.mark.parametrize("text", [None, "", "  ", " , \n"])
def test_peer_address_map_empty(text: str | None) -> None:
    amap = PeerAddressMap.parse(text)
    assert not amap and len(amap) == 0
    assert amap.map("h", 1) == ("h", 1)


@pytest.mark.parametrize(
    "entry",
    [
        "nifi-0:8443",
        "nifi-0=127.0.0.1:1",
        "nifi-0:8443=127.0.0.1",
        "nifi-0:8443=127.0.0.1:0",
        "nifi-0:8443=127.0.0.1:65536",
        "nifi-0:x=127.0.0.1:1",
        "nifi 0:8443=127.0.0.1:1",
        "nifi-0:8443=127.0.0.1:1=2",
        ":8443=h:1",
    ],
)
def test_peer_address_map_bad_entry_is_named(entry: str) -> None:
    with pytest.raises(ConfigError) as info:
        PeerAddressMap.parse(f"ok:1=ok:2,{entry}", option="peerAddressMapping")
    assert repr(entry) in str(info.value)
    assert info.value.option == "peerAddressMapping"


def test_peer_address_map_duplicate_source() -> None:
    with pytest.raises(ConfigError, match="mapped twice"):
        PeerAddressMap.parse("a:1=b:2,A:1=c:3")


def test_peer_address_map_from_mapping() -> None:
    amap = PeerAddressMap.from_mapping({("a", 1): ("b", 2)})
    assert amap.map("a", 1) == ("b", 2)


@pytest.mark.parametrize(
    "text",
    [
        "http://user:hunter2@h:8080/nifi",
        "http://user:hunter2@h:notaport/nifi",
        "ftp://user:hunter2@h/nifi",
        "https://a:8443/nifi,http://user:hunter2@b:8080/nifi",
    ],
)
def test_user_info_is_refused_and_never_shown(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_cluster_urls(text, option="url")
    assert "hunter2" not in str(info.value) and "hunter2" not in repr(info.value)
    assert info.value.option == "url"


def test_redact_url() -> None:
    from pyspark_s2s.protocol.urls import redact_url

    assert redact_url("http://u:p@h:1/x@y") == "http://***@h:1/x@y"
    assert redact_url("http://h:1/nifi") == "http://h:1/nifi"
