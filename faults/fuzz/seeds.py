"""Seeds and token dictionaries that targets of more than one area start from: Site-to-Site
packets (plain and compressed), request headers, and number, JSON and text tokens.

Owns: :data:`SAMPLE_PACKETS`, :func:`packet_seeds`, :func:`compressed_seeds`, :func:`header_seeds`
and the token tuples. Must not import: the other modules of :mod:`faults.fuzz`, tests/; of the
package only the protocol core's encoders.
"""

from __future__ import annotations

from pyspark_s2s.protocol.codec import encode_packet
from pyspark_s2s.protocol.stream import PacketStreamEncoder

__all__ = ["JSON_TOKENS", "NUM_TOKENS", "SAMPLE_PACKETS", "TEXT_TOKENS", "compressed_seeds", "header_seeds",
           "packet_seeds"]

SAMPLE_PACKETS: list[tuple[dict[str, str], bytes]] = [
    ({}, b""),
    ({"filename": "a.txt", "path": "./"}, b"hello world"),
    ({"k": "v", "\u00fc": "\u00df", "": ""}, bytes(range(40))),
    ({"uuid": "0f2c5b3e-8c44-4a52-9e2f-9d1d1f6b6c11"}, b"x" * 70),
    ({"mime.type": "application/json"}, b'{"a": [1, 2, 3]}'),
]


def packet_seeds() -> list[bytes]:
    one = [encode_packet(a, c) for a, c in SAMPLE_PACKETS]
    return [*one, b"".join(one), one[1] * 3, encode_packet({"big": "y"}, b"z" * 300)]


def compressed_seeds() -> list[bytes]:
    out = []
    for attrs, content in [*SAMPLE_PACKETS, ({"big": "1"}, bytes(range(256)) * 300)]:
        enc = PacketStreamEncoder(compress=True)
        out.append(enc.packet(attrs, content))
    out.append(b"".join(out[:3]))
    out.append(out[1][:-1])  # EOF in place of the final 0x00
    return out


NUM_TOKENS = (b"0", b"-1", b"2147483647", b"2147483648", b"-2147483649", b"9223372036854775808",
              b"9" * 5000, b"0" * 5000 + b"1", b"1e999", b"-0", b"+1", b" 1", b"1_0", b"\xd9\xa1",
              b"NaN", b"Infinity", b"0x10", b"1.5")
JSON_TOKENS = (b"[" * 3000, b"{\"a\":" * 2000, b"1e999", b"-1e999", b"NaN", b"\"\\ud800\"", b"null",
               b"true", b"[]", b"{}", b"\"\"", b"9" * 5000, b"\x00", b"\xff\xfe", b"1.0")
TEXT_TOKENS = (b"\x00", b"\r\n", b"\n", b"\xff", b"\xed\xa0\x80", b"%", b"%zz", b"%00", b"[", b"]", b"::",
               b"@", b"//", b"=", b",", b";", b" ", b"\t", "\u2028".encode(),
               b"\xef\xbc\x9a", b"~", b"a" * 3000)


def header_seeds() -> list[bytes]:
    return [
        (b"Host: 127.0.0.1:8080\nAccept: application/json, */*;q=0.5\nx-nifi-site-to-site-protocol-version: 1\n"
        b"x-nifi-site-to-site-use-compression: true\nx-nifi-site-to-site-batch-count: 10\n"
        b"x-nifi-site-to-site-batch-size: 1048576\nx-nifi-site-to-site-batch-duration: 5000\n"
        b"x-nifi-site-to-site-request-expiration: 30000\nContent-Length: 12"),
        (b"Host: [::1]:8443\nX-ProxyScheme: https\nX-ProxyHost: proxy:443\nX-ProxyPort: 9443\n"
        b"X-ProxyContextPath: /ctx/\nTransfer-Encoding: chunked\nAccept: application/octet-stream;q=0"),
        (b"X-Forwarded-Proto: https,http\nX-Forwarded-Host: a,b\nX-Forwarded-Prefix: /p\n"
        b"x-nifi-site-to-site-protocol-version: 999"),
    ]
