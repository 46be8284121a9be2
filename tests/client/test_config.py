"""The options table: NiFi names, defaults, validation naming the option, secrets kept out of
reprs/errors/pickles' text, and docs/client.md generated from the table."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from pyspark_s2s.client import (
    OPTIONS,
    SiteToSiteClient,
    SiteToSiteClientConfig,
    docgen,
)
from pyspark_s2s.client.config import parse_duration, parse_size
from pyspark_s2s.client.docgen import doc_drift
from pyspark_s2s.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def test_defaults_match_nifi():
    cfg = SiteToSiteClientConfig(urls="http://h:8080/nifi", port_name="p")
    assert (cfg.timeout, cfg.idle_expiration, cfg.penalization_period, cfg.cache_expiration) == (30, 30, 3, 30)
    assert (cfg.batch_count, cfg.batch_size, cfg.batch_duration, cfg.use_compression) == (0, 0, 0, False)
    assert cfg.peer_refresh_interval == 60 and cfg.transport_protocol == "HTTP"


def test_nifi_names_case_insensitive_and_aliases():
    cfg = SiteToSiteClientConfig.from_options({
        "URL": "http://a:1/nifi,http://b:1/nifi", "PORTNAME": "in", "timeout": "5 secs",
        "nodePenalizationPeriod": "250 millis", "idleExpiration": "2 mins", "batchSize": "10 MB",
        "batchDuration": "1.5 sec", "useCompression": "true", "cacheExpiration": 12,
    })
    assert cfg.urls == ("http://a:1/nifi-api", "http://b:1/nifi-api")
    assert (cfg.timeout, cfg.penalization_period, cfg.idle_expiration) == (5, 0.25, 120)
    assert (cfg.batch_size, cfg.batch_duration, cfg.use_compression, cfg.cache_expiration) == (10 << 20, 1.5, True, 12)
    assert cfg.url == "http://a:1/nifi-api,http://b:1/nifi-api"


@pytest.mark.parametrize("text,seconds", [("30 sec", 30), ("5 mins", 300), ("250 ms", 0.25), ("1 hour", 3600),
                                          ("2 d", 172800), (7, 7), (0.5, 0.5), ("10", 10), ("100 millis", 0.1)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,size", [("10 MB", 10 << 20), ("1 KB", 1024), ("512", 512), (7, 7), ("2 GiB", 2 << 30)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("options,option", [
    ({"timeout": "soon"}, "timeout"),
    ({"timeout": "-1 sec"}, "timeout"),
    ({"timeout": 0}, "timeout"),
    ({"batchCount": -1}, "batchCount"),
    ({"batchCount": "many"}, "batchCount"),
    ({"batchSize": "10 parsecs"}, "batchSize"),
    ({"useCompression": "maybe"}, "useCompression"),
    ({"proxyHost": "p"}, "proxyPort"),
    ({"proxyPort": 3128}, "proxyHost"),
    ({"proxyHost": "p", "proxyPort": 70000}, "proxyPort"),
    ({"proxyHost": "p", "proxyPort": 1, "proxyUsername": "u"}, "proxyPassword"),
    ({"keystoreFilename": "a.jks"}, "keystoreType"),
    ({"keystoreFilename": "a.p12"}, "keystorePassword"),
    ({"keystoreType": "PKCS12"}, "keystoreFilename"),
    ({"truststoreType": "PEM"}, "truststoreFilename"),
    ({"transportProtocol": "SOCKET"}, "transportProtocol"),
    ({"peerAddressMap": "a:1=b"}, "peerAddressMap"),
    ({"portName": "a", "portIdentifier": "b"}, "portIdentifier"),
    ({"url": "ftp://x"}, "url"),
    ({"url": ""}, "url"),
])
def test_invalid_values_name_the_option(options, option):
    opts = {"url": "http://h:8080/nifi", **options}
    with pytest.raises(ConfigError) as info:
        SiteToSiteClientConfig.from_options(opts)
    assert info.value.option == option


def test_unknown_option_suggests_closest():
    with pytest.raises(ConfigError, match="did you mean 'portName'"):
        SiteToSiteClientConfig.from_options({"url": "http://h", "prtName": "x"})
    with pytest.raises(ConfigError, match="given twice"):
        SiteToSiteClientConfig.from_options({"url": "http://h", "urls": "http://h"})


def test_secrets_never_shown():
    secret = "s3cr3t-Value-42"
    cfg = SiteToSiteClientConfig.from_options({
        "url": "https://h:1/nifi", "proxyHost": "p", "proxyPort": 1, "proxyUsername": "u", "proxyPassword": secret,
        "keystoreFilename": "k.p12", "keystorePassword": secret, "truststoreFilename": "t.p12",
        "truststorePassword": secret})
    for text in (repr(cfg), str(cfg), repr(cfg.to_options()), repr(SiteToSiteClient(cfg))):
        assert secret not in text
    assert cfg.proxy_password.reveal() == secret
    clone = pickle.loads(pickle.dumps(cfg))
    assert clone == cfg and clone.keystore_password.reveal() == secret
    with pytest.raises(ConfigError) as info:
        SiteToSiteClientConfig.from_options({"url": "http://h", "proxyPassword": 12345678})
    assert "12345678" not in str(info.value)


def test_missing_keystore_file_names_option(tmp_path):
    with pytest.raises(ConfigError) as info:
        SiteToSiteClient(url="https://h:1/nifi", keystoreFilename=str(tmp_path / "none.pem")).site_info()
    assert info.value.option == "keystoreFilename"


def test_replace_and_to_options_round_trip():
    cfg = SiteToSiteClientConfig.from_options({"url": "http://h:1/nifi", "portName": "in", "peerAddressMap": "a:1=b:2"})
    again = SiteToSiteClientConfig.from_options(cfg.to_options())
    assert again == cfg
    assert cfg.replace(timeout="1 sec").timeout == 1 and cfg.replace(portName="x").port_name == "x"


def test_doc_options_table_is_current():
    """docs/client.md shows exactly the table generated from OPTIONS (a failure shows the diff)."""
    drift = doc_drift(str(DOC))
    assert not drift, f"docs/client.md drifted from OPTIONS; run python -m pyspark_s2s.client.docgen\n{drift}"
    text = DOC.read_text()
    for opt in OPTIONS:
        assert re.search(rf"`{opt.name}`", text)


def test_drift_check_catches_an_edited_row_and_regeneration_fixes_it(tmp_path, capsys):
    page = tmp_path / "client.md"
    original = DOC.read_text()
    row = next(line for line in original.splitlines() if line.startswith("| `batchCount`"))
    page.write_text(original.replace(row, row.replace("|", "| stale", 2)[:-1] + " edited by hand |"))
    drift = doc_drift(str(page))
    assert f"-{row.replace('|', '| stale', 2)[:-1]}" in drift and f"+{row}" in drift
    assert docgen.main(["--check", str(page)]) == 1 and "batchCount" in capsys.readouterr().out
    assert docgen.main([str(page)]) == 0 and page.read_text() == original
    assert docgen.main(["--check", str(page)]) == 0 and doc_drift(str(page)) == ""


def test_drift_check_needs_the_markers(tmp_path):
    page = tmp_path / "client.md"
    page.write_text("# no table here\n")
    with pytest.raises(ValueError, match="options:begin"):
        doc_drift(str(page))