"""records/sandbox.py: record sets parsed one by one in a child process that may die or hang.

The children are real interpreters; the crash and the hang come from the package's test-only
hooks (``PYSPARK_S2S_TEST_ABORT_MARKER``: ``os.abort()``; ``PYSPARK_S2S_TEST_HANG_MARKER``: a
sleep of an hour), which a child takes from its environment as a Spark worker's child would.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from pyspark_s2s.records import sandbox
from pyspark_s2s.records.read import ReadSettings

TARGET = pa.schema([("a", pa.int64()), ("s", pa.string())])


def _item(n: int, s: str) -> tuple[dict[str, str], bytes]:
    return {"uuid": f"ff-{n}"}, f'[{{"a": {n}, "s": "{s}"}}]'.encode()


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(sandbox.TEST_ABORT_MARKER_ENV, "BOOM")
    monkeypatch.setenv(sandbox.TEST_HANG_MARKER_ENV, "SLEEPY")
    monkeypatch.setattr(sandbox, "BASE_SECONDS", 3.0)
    return sandbox


def test_each_outcome_is_named_and_a_fresh_child_takes_the_rest(hooked: Any) -> None:
    items = [_item(1, "x"), _item(2, "BOOM"), (({"uuid": "ff-3"}), b'[{"a": 3'), _item(4, "SLEEPY"),
             _item(5, "y"), _item(6, "BOOM")]
    started = time.monotonic()
    verdicts = sandbox.check_record_sets("json", TARGET, ReadSettings(), items)
    took = time.monotonic() - started
    assert [v.outcome for v in verdicts] == ["ok", "crashed", "malformed", "hung", "ok", "crashed"]
    assert [v.poison for v in verdicts] == [False, True, False, True, False, True]
    assert verdicts[1].detail == "the process was killed by SIGABRT"
    assert "cannot read the JSON" in verdicts[2].detail
    assert verdicts[3].detail == "its parse did not finish within 3 s; the process was killed"
    assert took < 60  # the hang cost its bound (3 s), not an hour


def test_a_parse_the_reader_refuses_is_malformed_not_poison() -> None:
    # no hooks: every FlowFile parses in the child exactly as in the worker
    items = [_item(1, "x"), ({"uuid": "ff-2"}, b"not json"), ({"uuid": "ff-3"}, b"")]
    verdicts = sandbox.check_record_sets("json", TARGET, ReadSettings(), items)
    assert [v.outcome for v in verdicts] == ["ok", "malformed", "ok"]


def test_a_child_that_raises_something_else_counts_as_crashed() -> None:
    # a reader bug (an exception other than MalformedRecordSet) ends the child: the verdict names
    # the exception's last line (here: a target that is no schema at all)
    verdicts = sandbox.check_record_sets("json", "not a schema", ReadSettings(), [_item(1, "x"), _item(2, "y")])
    assert [v.outcome for v in verdicts] == ["crashed", "crashed"]
    assert verdicts[0].detail.startswith("the process exited with status 1: ")
    assert "Error" in verdicts[0].detail


def test_an_unknown_format_is_the_readers_own_refusal() -> None:
    verdicts = sandbox.check_record_sets("no-such-format", TARGET, ReadSettings(), [_item(1, "x")])
    assert verdicts[0].outcome == "malformed"
    assert "unknown record format" in verdicts[0].detail


def test_time_bound_grows_with_the_content() -> None:
    assert sandbox.time_bound(0) == sandbox.BASE_SECONDS
    assert sandbox.time_bound(1_000_000_000) == pytest.approx(sandbox.BASE_SECONDS + 100)


def test_the_hooks_are_off_unless_set() -> None:
    # the suite runs without the variables: nothing here can abort the process
    assert sandbox.ABORT_MARKER is None and sandbox.HANG_MARKER is None
    sandbox.crash_hook(b"BOOM SLEEPY")
