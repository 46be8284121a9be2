"""The record-mode type table (records/typetable.py) is the one docs/records.md shows, and its
"refused" cells are exactly the types the sink's own check refuses, format by format."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_s2s.errors import ConfigError
from pyspark_s2s.records.types import check_field
from pyspark_s2s.records.typetable import (
    DOC_BEGIN,
    DOC_END,
    FORMATS,
    TYPE_TABLE,
    type_table_markdown,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "records.md"


def test_docs_show_the_generated_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    written = text[text.index(DOC_BEGIN) + len(DOC_BEGIN):text.index(DOC_END)]
    assert written == type_table_markdown(), (
        "docs/records.md's type table is stale: run python -c \"from pyspark_s2s.records.typetable import "
        "update_doc; update_doc('docs/records.md')\"")


@pytest.mark.parametrize("row", TYPE_TABLE, ids=lambda r: r.spark)
@pytest.mark.parametrize("fmt", FORMATS)
def test_refused_cells_are_what_the_sink_refuses(row: object, fmt: str) -> None:
    from pyspark_s2s.records.typetable import TypeRow
    assert isinstance(row, TypeRow)
    if row.cell(fmt) is None:
        with pytest.raises(ConfigError, match=f"column 'c' .* cannot be written with recordFormat={fmt}"):
            check_field("c", row.arrow(), fmt)
    else:
        check_field("c", row.arrow(), fmt)
