"""A JSON record set's records counted before any parser runs (``records.json_read.json_rows``,
``records.limits.json_structure``): the count the memory budget is checked with, and the shape
checks. NiFi's default output (one array of records of scalar fields: nothing deeper than the
records' own braces) is counted without the tokens' levels (``JsonStructure.one_shallow_array``);
every other shape by the levels. Both must
give the count Python's own ``json`` module reads, and the same answer as each other."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import limits
from pyspark_s2s.records.json_read import json_rows

# text with what the token scan must see through: brackets, braces, commas, colons, quotes and
# backslashes inside strings
_TEXT = st.text(alphabet=st.sampled_from(list('ab []{},:"\\é\n')), max_size=6)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), _TEXT,
                     st.floats(allow_nan=False, allow_infinity=False))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                       max_leaves=6)
_FLAT = st.dictionaries(_TEXT, _SCALARS, max_size=5)


def _dumps(items: Any, pretty: bool) -> bytes:
    return json.dumps(items, indent=2 if pretty else None, separators=None if pretty else (",", ":"),
                      ensure_ascii=False).encode()


def _by_levels(text: bytes) -> int:
    """The records of a top-level array counted by the tokens' levels (the general path)."""
    shape = limits.json_structure(text)
    assert shape is not None and shape.at(0) == b"[]"
    return shape.at(1).count(b"{")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_FLAT, _VALUES), max_size=120), st.booleans())
def test_an_arrays_records_are_counted_as_json_reads_them(items: list[Any], pretty: bool) -> None:
    text = _dumps(items, pretty)
    want = sum(isinstance(x, dict) for x in items)
    assert json_rows(text, b"[") == want
    assert _by_levels(text) == want


@settings(max_examples=100, deadline=None)
@given(st.lists(_FLAT, min_size=60, max_size=200), st.booleans())
def test_records_of_scalar_fields_take_the_shallow_path_and_agree_with_the_levels(items: list[Any], pretty: bool) -> None:
    text = _dumps(items, pretty)  # at least 60 records: past the tokens walked in Python, into Arrow's
    shape = limits.json_structure(text)
    assert shape is not None and shape.one_shallow_array()
    assert shape.tokens.count(b"{") == _by_levels(text) == len(items) == json_rows(text, b"[")


@pytest.mark.parametrize("text, flat", [
    (b"[]", True),
    (b'[{"a":1},{"b":"]["}]', True),
    (b'[{"a":[1]}]', False),  # a container inside a record: counted by the levels
    (b'[{"a":{"b":1}}]', False),
    (b"[[1],[2]]", True),  # no record in it, and nothing for a { to hide in
    (b"[[{}]]", False),
    (b"[][]", False),  # two arrays: the top level holds more than the two brackets
    (b'{"a":1}', False),
])
def test_which_texts_are_one_shallow_array(text: bytes, flat: bool) -> None:
    # the text as it is (its few tokens walked in Python), and with 300 more (Arrow's kernels)
    pad = b",".join([b"[]"] * 150)
    for padded in (text, text[:1] + pad + (b"," if len(text) > 2 else b"") + text[1:]):
        shape = limits.json_structure(padded)
        assert shape is not None
        assert shape.one_shallow_array() is flat
        if flat:  # the levels agree: the top level is the two brackets, every { is at level 1
            assert shape.at(0) == b"[]" and shape.at(1).count(b"{") == shape.tokens.count(b"{")


def test_shapes_that_are_not_one_array_of_records_are_still_refused() -> None:
    many = b",".join([b'{"a":1}'] * 300)
    with pytest.raises(MalformedRecordSet, match="content after the top-level array"):
        json_rows(b"[" + many + b"] {}", b"[")
    with pytest.raises(MalformedRecordSet, match="content after the top-level array"):
        json_rows(b"[" + many + b"][1]", b"[")
    with pytest.raises(MalformedRecordSet, match="not records separated by commas"):
        json_rows(many, b"{")
    assert json_rows(b"[" + many + b"]", b"[") == 300
    assert json_rows(b"[" + many + b',{"b":[{"c":1}]}]', b"[") == 301  # a nested record is not counted


def test_pooled_lays_any_bytes_like_parts_end_to_end_in_one_arrow_buffer() -> None:
    import pyarrow as pa

    content = pa.py_buffer(b'[{"a":1}]')
    out = limits.pooled(b'{"records":', content, memoryview(b"}"), memoryview(b"xyz")[1:2])
    assert isinstance(out, pa.Buffer)
    assert out.to_pybytes() == b'{"records":[{"a":1}]}y'
    assert limits.pooled().size == 0
