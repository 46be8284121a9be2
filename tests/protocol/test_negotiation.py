"""Transport version negotiation (docs/protocol.md §2, §12 item 45) and handshake headers (§1.1, §7)."""

from __future__ import annotations

import http.client
import io

import pytest

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codes import Header, ResponseCode
from pyspark_s2s.protocol.negotiation import (
    HandshakeProperties,
    accept_server_ttl,
    accept_server_version,
    get_header,
    handshake_headers,
    negotiate_transport_version,
    parse_handshake_headers,
)

# -- server: negotiate -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,version",
    [("1", 1), ("999", 1), ("2", 1), ("+1", 1), ("01", 1), ("2147483647", 1)],
)
def test_negotiate_picks_supported_version(value: str, version: int) -> None:
    assert negotiate_transport_version(value) == version


@pytest.mark.parametrize(
    "value,message",
    [
        (None, "Protocol version was not specified."),
        ("", "Protocol version was not specified."),
        ("abc", "Specified protocol version was not in a valid number format: abc"),
        (" 1", "Specified protocol version was not in a valid number format:  1"),
        ("1.0", "Specified protocol version was not in a valid number format: 1.0"),
        ("1_0", "Specified protocol version was not in a valid number format: 1_0"),
        ("2147483648", "Specified protocol version was not in a valid number format: 2147483648"),
        ("0", "Specified protocol version is not supported: 0"),
        ("-1", "Specified protocol version is not supported: -1"),
    ],
)
def test_negotiate_errors(value: str | None, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        negotiate_transport_version(value)
    assert info.value.message == message
    assert info.value.http_status == 400
    assert info.value.response_code == ResponseCode.ABORT == 250


def test_negotiate_with_several_supported_versions_in_preference_order() -> None:
    # NiFi 1.10-1.11 supported "2,1"
    assert negotiate_transport_version("2", (2, 1)) == 2
    assert negotiate_transport_version("1", (2, 1)) == 1
    assert negotiate_transport_version("5", (2, 1)) == 2
    with pytest.raises(ProtocolError, match="not supported: 0"):
        negotiate_transport_version("0", (2, 1))


# -- client: accept ------------------------------------------------------------------------------


def test_accept_server_version() -> None:
    assert accept_server_version("1") == 1
    assert accept_server_version("2", (2, 1)) == 2


@pytest.mark.parametrize("value", [None, "", "  ", "x", "2", "0"])
def test_accept_server_version_rejects(value: str | None) -> None:
    with pytest.raises(ProtocolError) as info:
        accept_server_version(value)
    assert info.value.http_status == 201
    assert Header.PROTOCOL_VERSION in info.value.message or "version" in info.value.message


def test_accept_server_ttl() -> None:
    assert accept_server_ttl("30") == 30
    assert accept_server_ttl("0") == 0
    for bad in (None, "", "-1", "3s", "1.5"):
        with pytest.raises(ProtocolError, match=Header.SERVER_TTL):
            accept_server_ttl(bad)


# -- server: handshake headers -------------------------------------------------------------------


def test_parse_no_headers() -> None:
    props = parse_handshake_headers({})
    assert props == HandshakeProperties()
    assert props.compress is False  # NiFi HTTP: a missing header means "no compression"


def test_parse_all_headers() -> None:
    props = parse_handshake_headers(
        {
            Header.USE_COMPRESSION: "true",
            Header.REQUEST_EXPIRATION: "1234",  # item 46: request expiration 1234 kept
            Header.BATCH_COUNT: "5",
            Header.BATCH_SIZE: "1048576",
            Header.BATCH_DURATION: "2000",
        }
    )
    assert props == HandshakeProperties(True, 1234, 5, 1048576, 2000)
    assert props.compress is True


@pytest.mark.parametrize("value,expected", [("true", True), ("TRUE", True), ("False", False), ("", None)])
def test_parse_compression_values(value: str, expected: bool | None) -> None:
    assert parse_handshake_headers({Header.USE_COMPRESSION: value}).use_compression is expected


def test_parse_headers_case_insensitively_from_http_message() -> None:
    raw = (
        b"X-NiFi-Site-To-Site-Use-Compression: true\r\n"
        b"X-NIFI-SITE-TO-SITE-BATCH-COUNT: 7\r\n\r\n"
    )
    message = http.client.parse_headers(io.BytesIO(raw))
    props = parse_handshake_headers(message)
    assert props.use_compression is True and props.batch_count == 7
    assert parse_handshake_headers({"X-Nifi-Site-To-Site-Batch-Size": "9"}).batch_size == 9
    assert get_header({"Location": "x"}, "location") == "x"


@pytest.mark.parametrize(
    "header,value,prop",
    [
        (Header.USE_COMPRESSION, "yes", "GZIP"),
        (Header.USE_COMPRESSION, "1", "GZIP"),
        (Header.REQUEST_EXPIRATION, "30s", "REQUEST_EXPIRATION_MILLIS"),
        (Header.BATCH_COUNT, "abc", "BATCH_COUNT"),
        (Header.BATCH_COUNT, "2147483648", "BATCH_COUNT"),  # beyond a Java int
        (Header.BATCH_SIZE, "1.5", "BATCH_SIZE"),
        (Header.BATCH_SIZE, "9223372036854775808", "BATCH_SIZE"),  # beyond a Java long
        (Header.BATCH_DURATION, " 5", "BATCH_DURATION"),
    ],
)
def test_parse_illegal_values(header: str, value: str, prop: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_handshake_headers({header: value})
    err = info.value
    assert err.response_code == ResponseCode.ILLEGAL_PROPERTY_VALUE == 231
    assert err.http_status == 400
    assert err.message == f"Received invalid value for property '{prop}'; invalid value: {value}"
    assert err.option == header


def test_parse_keeps_java_parsable_numbers() -> None:
    props = parse_handshake_headers(
        {Header.BATCH_COUNT: "-1", Header.BATCH_SIZE: "+10", Header.BATCH_DURATION: "007"}
    )
    assert (props.batch_count, props.batch_size, props.batch_duration_ms) == (-1, 10, 7)


# -- client: build headers ---------------------------------------------------------------------


def test_handshake_headers_defaults_like_the_java_client() -> None:
    assert handshake_headers(False, 30000, 0, 0, 0) == {
        Header.PROTOCOL_VERSION: "1",
        Header.REQUEST_EXPIRATION: "30000",
    }


def test_handshake_headers_all_set() -> None:
    assert handshake_headers(True, 1000, 10, 2048, 500, version=1) == {
        Header.PROTOCOL_VERSION: "1",
        Header.USE_COMPRESSION: "true",
        Header.REQUEST_EXPIRATION: "1000",
        Header.BATCH_COUNT: "10",
        Header.BATCH_SIZE: "2048",
        Header.BATCH_DURATION: "500",
    }


def test_handshake_headers_skip_none_and_non_positive() -> None:
    assert handshake_headers(False, None, None, -5, None, version=2) == {Header.PROTOCOL_VERSION: "2"}


def test_headers_round_trip_through_the_server_parser() -> None:
    headers = handshake_headers(True, 30000, 3, 100, 250)
    assert parse_handshake_headers(headers) == HandshakeProperties(True, 30000, 3, 100, 250)
    assert negotiate_transport_version(headers[Header.PROTOCOL_VERSION]) == 1
