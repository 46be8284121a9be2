"""``python -m pyspark_s2s.demo`` (the client-only round trip; ``make demo`` runs the Spark one): the round trip passes, and a
mismatch is caught and reported with a non-zero exit status."""

from __future__ import annotations

import re

import pytest

from pyspark_s2s import demo


def test_demo_round_trip_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main([]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^s2s demo: reference server at http://127\.0\.0\.1:\d+/nifi", out, re.MULTILINE)
    rows = re.findall(r"^  (send|receive)\s+([0-9a-f-]{36})\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", out, re.MULTILINE)
    assert [r[0] for r in rows].count("send") == 2
    assert sum(int(r[2]) for r in rows if r[0] == "send") == 7
    assert sum(int(r[2]) for r in rows if r[0] == "receive") == 7
    assert all(r[4] == r[5] for r in rows)  # client CRC32 == server CRC32
    assert "compressed" in out
    assert "verified: 7 FlowFiles" in out
    assert out.rstrip().splitlines()[-1].startswith("s2s demo: OK")


def test_demo_reports_a_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    def tamper(d: demo.Demo) -> None:
        attrs, content = d.received["2"]
        d.received["2"] = (attrs, content + b"!")

    lines: list[str] = []
    status = demo.run((demo.step_send, demo.step_receive, tamper, demo.step_verify), out=lines.append)
    assert status == 1
    assert lines[-1].startswith("s2s demo: FAILED: FlowFile 2: content differs")


def test_demo_reports_a_checksum_disagreement() -> None:
    def tamper(d: demo.Demo) -> None:
        d.transactions[0].checksum ^= 1

    lines: list[str] = []
    status = demo.run((demo.step_send, demo.step_receive, tamper, demo.step_verify), out=lines.append)
    assert status == 1
    assert "client CRC32" in lines[-1] and "server CRC32" in lines[-1]
