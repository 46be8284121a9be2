"""The queue page (server/page.py; docs/server.md "The queue page").

The page itself is tested in a real browser: Debian's chromium, headless, driven through Debian's
chromium-driver by Selenium (the Makefile's ``browser`` step installs both when missing; selenium
is in the test extra). Without them that test is skipped, except under ``CI=true``, where it fails:
a missing install step must not pass unseen. The browser may resolve no host name but 127.0.0.1.
The TLS access rule, the JSON and the content preview are checked without a browser.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from serverproc import ServerProcess, ServerThread

from pyspark_s2s.client import SendTransaction, SiteToSiteClient
from pyspark_s2s.server.page import LISTING_MAX, content_preview, page_url
from pyspark_s2s.server.tls import CLIENT_DN

PORTS = ("--input-port", "in", "--output-port", "out", "--route", "in=out")
WAIT = 20.0  # seconds any one thing may take to show on the page (it polls every 1.5 s)


# -- the browser ------------------------------------------------------------------------------------


def _missing_browser() -> list[str]:
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (the test extra)")
    return missing


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    missing = _missing_browser()
    if missing:
        reason = (f"no {', '.join(missing)}: `make test` installs them (apt-get install chromium chromium-driver "
                  f"as root; selenium with the test extra)")
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1500",
        f"--user-data-dir={tmp_path / 'chromium-profile'}", "--no-first-run", "--no-default-browser-check",
        # 127.0.0.1 only: every other host name fails to resolve; no background requests either
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-extensions", "--disable-domain-reliability",
    ):
        options.add_argument(arg)
    service = Service(executable_path=str(shutil.which("chromedriver")),
                      log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, what: str, until: Callable[[Any], Any], timeout: float = WAIT) -> Any:
    """What ``until`` returns once it is truthy; fails after ``timeout`` s naming ``what``."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException, ValueError))
    return wait.until(until, message=f"the page did not show {what} within {timeout:g} s")


def _css(root: Any, selector: str) -> Any:
    return root.find_element("css selector", selector)


def _all(root: Any, selector: str) -> list[Any]:
    return list(root.find_elements("css selector", selector))


def _polls(driver: Any) -> int:
    return int(_css(driver, "body").get_attribute("data-polls") or 0)


def _queued(driver: Any, port: str, node: int) -> int:
    return int(_css(driver, f'#queues td.cell[data-port="{port}"][data-node="{node}"] [data-field="queued"]').text)


def _total(driver: Any, port: str) -> int:
    return int(_css(driver, f'#queues tr[data-port="{port}"] [data-field="total"]').text)


#: what is sent, by filename: (content, extra attributes, the preview the page must show: kind, text)
_BLOB = bytes(range(256)) * 4
_SENT: dict[str, tuple[bytes, dict[str, str], str, str]] = {
    **{f"held-{i}.txt": (f"held {i}\n".encode(), {}, "text", f"held {i}\n") for i in range(3)},
    "note.txt": (b"plain text\nsecond line\n", {"greeting": "hello, queue page"}, "text",
                 "plain text\nsecond line\n"),
    "blob.bin": (_BLOB, {}, "hex", _BLOB[:256].hex(" ") + "\u2026"),
    "markup.txt": ("<b>not markup</b> & 'quotes' é".encode(), {"evil<attr>": "<img src=x onerror=alert(1)>"},
                   "text", "<b>not markup</b> & 'quotes' é"),
}


@pytest.mark.slow
def test_the_page_follows_the_queues_and_lists_one_without_taking(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    with ServerProcess("--nodes", "2", *PORTS) as srv:
        # 1. the page, before anything arrived: both nodes alive, every queue empty
        browser.get(page_url(srv.url))
        _wait(browser, "a first refresh", lambda d: _polls(d) >= 1)
        assert _css(browser, "#status").text == "live"
        nodes = _all(browser, "#nodes tbody tr")
        assert [n.get_attribute("data-node") for n in nodes] == ["0", "1"]
        assert [_css(n, '[data-field="state"]').text for n in nodes] == ["alive", "alive"]
        assert [_queued(browser, "out", k) for k in (0, 1)] == [0, 0]
        browser.execute_script("window.s2sNotReloaded = true")  # gone if the page were loaded again

        with SiteToSiteClient(url=srv.url, portName="in") as client:
            # 2. an open transaction: uploaded and checked, not committed yet (HELD, its TTL running)
            tx = client.create_transaction("SEND")
            assert isinstance(tx, SendTransaction)
            for i in range(3):
                name = f"held-{i}.txt"
                tx.send(_SENT[name][0], {"filename": name})
            tx.confirm()
            row = _wait(browser, "the open transaction",
                        lambda d: _css(d, f'#transactions tr[data-transaction="{tx.transaction_id}"]'))
            cells = [td.text for td in _all(row, "td")]
            assert cells[2:6] == ["in", "send", "HELD", "3"], cells
            expires_in = float(_css(row, '[data-field="expiresIn"]').text.removesuffix(" s"))
            assert 0 < expires_in <= 31  # --ttl 30: expired once 31 whole seconds have passed
            assert tx.complete().flow_files == 3

            # 3. a second transaction, committed at once
            client.send([(content, {"filename": name, **extra})
                         for name, (content, extra, _kind, _text) in _SENT.items() if not name.startswith("held")])

        # 4. the counts change on the page, without a reload: per node as the admin API says
        expected = {k: srv.admin.queued("out", node=k) for k in (0, 1)}
        expected_bytes = {k: srv.admin.port("out", node=k)["queuedBytes"] for k in (0, 1)}
        assert sum(expected.values()) == len(_SENT)
        _wait(browser, f"the queued counts {expected}",
              lambda d: [_queued(d, "out", k) for k in (0, 1)] == [expected[0], expected[1]]
              and _total(d, "out") == len(_SENT))
        for k in (0, 1):
            cell = _css(browser, f'#queues td.cell[data-port="out"][data-node="{k}"] [data-field="queuedBytes"]')
            assert cell.get_attribute("title") == f"{expected_bytes[k]} bytes"
        assert browser.execute_script("return window.s2sNotReloaded") is True
        _wait(browser, "the open transaction gone",
              lambda d: not _all(d, f'#transactions tr[data-transaction="{tx.transaction_id}"]'))
        commits = _wait(browser, "both commits", lambda d: [r.get_attribute("data-transaction")
                                                              for r in _all(d, "#commits tr[data-transaction]")])
        assert len(commits) == 2 and tx.transaction_id in commits

        # 5. each queue listed as NiFi's "List queue": uuid, attributes, a preview of the content
        seen: set[str] = set()
        for k in (0, 1):
            if not expected[k]:
                continue
            before = srv.admin.flowfiles("out", node=k)  # the admin API's listing without drain
            _css(browser, f'#queues td.cell[data-port="out"][data-node="{k}"] button[data-action="list"]').click()

            def listing_shown(d: Any, k: int = k) -> Any:
                return (_css(d, "#listing-title").text == f"Queue of port out on node {k}"
                        and len(found := _all(d, "#listing tbody tr[data-uuid]")) == expected[k] and found)

            rows = _wait(browser, f"the listing of node {k}", listing_shown)
            assert [r.get_attribute("data-uuid") for r in rows] == [ff["attributes"]["uuid"] for ff in before]
            for row, ff in zip(rows, before, strict=True):
                name = ff["attributes"]["filename"]
                seen.add(name)
                listed = _css(row, '[data-field="attributes"]').get_attribute("textContent")
                for key, value in ff["attributes"].items():
                    assert f"{key} = {value}" in listed
                preview = _css(row, "pre.preview")
                _content, _extra, kind, text = _SENT[name]
                assert preview.get_attribute("data-kind") == kind, name
                assert preview.get_attribute("textContent") == text, name
            assert "nothing taken" in _css(browser, "#listing-summary").text
        assert seen == set(_SENT)
        # attribute names, values and contents are shown as text, never read as markup
        assert not _all(browser, "#listing img, #listing b")

        # 6. nothing was taken, after a few more refreshes of the open listing too
        polls = _polls(browser)
        _wait(browser, "two more refreshes", lambda d: _polls(d) >= polls + 2)
        assert {k: srv.admin.queued("out", node=k) for k in (0, 1)} == expected
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert not errors, errors

        shot = tmp_path / "queue-page.png"
        assert browser.save_screenshot(str(shot))
    with capsys.disabled():
        print(f"\nqueue page screenshot: {shot} (browser test took {time.monotonic() - started:.1f} s)")


# -- without a browser ------------------------------------------------------------------------------


def test_the_page_and_its_data_over_plain_http() -> None:
    with ServerThread(*PORTS) as srv:
        url = page_url(srv.url)
        moved = requests.get(url.rstrip("/"), allow_redirects=False, timeout=10)
        assert moved.status_code == 302 and moved.headers["Location"] == "s2s-queues/"
        page = requests.get(url, timeout=10)
        assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "default-src 'none'" in page.headers["Content-Security-Policy"]
        assert page.headers["Cache-Control"] == "no-store"
        # nothing from elsewhere: every src/href is relative (or the empty data: icon)
        refs = re.findall(r'(?:src|href)="([^"]*)"', page.text)
        assert refs and all(not re.match(r"^(?:[a-z]+:|//)", r) or r == "data:," for r in refs), refs
        for name, kind in (("queues.js", "text/javascript"), ("queues.css", "text/css")):
            answer = requests.get(url + name, timeout=10)
            assert answer.status_code == 200 and answer.headers["Content-Type"].startswith(kind)
        assert requests.get(url + "nope.js", timeout=10).status_code == 404
        assert requests.post(url + "api/state", timeout=10).status_code == 405

        srv.admin.enqueue("out", count=5, size=3000)
        state = requests.get(url + "api/state", timeout=10).json()
        assert [p["name"] for p in state["ports"]] == ["in", "out"]
        assert state["nodes"][0]["ports"]["out"] == {"state": "RUNNING", "queued": 5, "queuedBytes": 15000,
                                                     "capacity": None, "full": False}
        listing = requests.get(url + "api/ports/out/flowfiles", params={"limit": 2, "preview": 8}, timeout=10).json()
        assert (listing["queued"], listing["listed"]) == (5, 2)
        first = listing["flowfiles"][0]
        assert first["attributes"]["filename"] == "flowfile-0" and first["size"] == 3000
        assert first["preview"] == {"kind": "text", "data": "flowfile", "bytes": 8, "truncated": True}
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", first["uuid"])
        for query, status in (({"limit": 0}, 400), ({"limit": LISTING_MAX + 1}, 400), ({"node": 9}, 404)):
            assert requests.get(url + "api/ports/out/flowfiles", params=query, timeout=10).status_code == status
        assert requests.get(url + "api/ports/nope/flowfiles", timeout=10).status_code == 404

        # the admin API's read-only listing of the first N
        admin = srv.url.removesuffix("/nifi") + "/s2s-admin/ports/out/flowfiles"
        first_two = requests.get(admin, params={"limit": 2, "content": 0}, timeout=10).json()["flowfiles"]
        assert [ff["attributes"]["filename"] for ff in first_two] == ["flowfile-0", "flowfile-1"]
        assert requests.get(admin, params={"limit": 2, "drain": 1}, timeout=10).status_code == 400
        assert srv.admin.queued("out") == 5


def test_under_tls_the_page_and_its_data_follow_the_api_access_rule() -> None:
    # the client's DN may use port "in" only; the "denied" DN is named nowhere
    with ServerProcess(*PORTS, "--allow", f"in={CLIENT_DN}", tls=True) as srv:
        ca = str(srv.ca)
        url = page_url(srv.url)
        site = requests.get(srv.url + "-api/site-to-site", verify=ca, cert=srv.client_cert, timeout=10)
        assert site.status_code == 200  # a certificate the Site-to-Site API accepts
        for target in (url.rstrip("/"), url, url + "queues.js", url + "api/state", url + "api/ports/in/flowfiles"):
            no_cert = requests.get(target, verify=ca, timeout=10, allow_redirects=False)
            assert no_cert.status_code == 401 and no_cert.headers["Content-Type"] == "text/plain", target
            assert "Contact the system administrator." in no_cert.text
            denied = requests.get(target, verify=ca, cert=srv.denied_cert, timeout=10, allow_redirects=False)
            assert denied.status_code == 403 and denied.headers["Content-Type"] == "text/plain", target
            allowed = requests.get(target, verify=ca, cert=srv.client_cert, timeout=10, allow_redirects=False)
            assert allowed.status_code in (200, 302), target
        state = requests.get(url + "api/state", verify=ca, cert=srv.client_cert, timeout=10).json()
        assert state["secure"] is True and state["identity"] == CLIENT_DN
        assert [p["name"] for p in state["ports"]] == ["in"]  # as the site details list only its ports
        assert set(state["nodes"][0]["ports"]) == {"in"}
        other = requests.get(url + "api/ports/out/flowfiles", verify=ca, cert=srv.client_cert, timeout=10)
        assert other.status_code == 403


def test_the_content_preview() -> None:
    assert content_preview(b"", 0) == {"kind": "text", "data": "", "bytes": 0, "truncated": False}
    assert content_preview(b"a\tb\r\n", 5)["kind"] == "text"
    assert content_preview(b"a\x00b", 3) == {"kind": "hex", "data": "61 00 62", "bytes": 3, "truncated": False}
    assert content_preview(b"\x1b[31m", 5)["kind"] == "hex"  # a terminal escape is not text
    # a character cut by the preview's end is dropped, not a reason for hex
    cut = "héé".encode()[:4]
    assert content_preview(cut, 5) == {"kind": "text", "data": "hé", "bytes": 4, "truncated": True}
    # ... but a whole content that is not UTF-8 is hex
    assert content_preview(cut, 4)["kind"] == "hex"
    assert content_preview(b"\xff\xfe", 10)["kind"] == "hex"
