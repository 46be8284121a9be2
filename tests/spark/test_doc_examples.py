"""The README's and the Spark pages' main examples, run as written against the reference server
(issue 18): each fenced block is read from the page, only its host names, paths and secrets are
replaced by the test server's, and it runs in the shared SparkSession. The README's server command
is started as printed (with a free port), and its pipeline must end: nothing left queued, nothing
sent round again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess
from sparkhelp import wait_for

from pyspark_s2s import cli

ROOT = Path(__file__).resolve().parents[2]
NIFI_URLS = "https://nifi-1:8443/nifi,https://nifi-2:8443/nifi"


def fenced(page: str, lang: str, index: int = 0) -> str:
    """The ``index``-th fenced block of language ``lang`` ('' for a plain one) on ``page``."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in (ROOT / page).read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.startswith("```"):
            if current is not None:
                current.append(line)
        elif current is None:
            current, block_lang = [], line[3:].strip()
        else:
            if block_lang == lang:
                blocks.append("".join(current))
            current = None
    assert len(blocks) > index, f"{page} has no {lang or 'plain'} block #{index}"
    return blocks[index]


def substituted(code: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in code, f"the example no longer contains {old!r}: update this test with the page"
        code = code.replace(old, new)
    return code


def commands(block: str) -> list[list[str]]:
    """The shell commands of a plain block (comments dropped, '\\' continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def test_readme_pipeline_runs_and_ends(spark: Any, tmp_path: Path) -> None:
    serve, send, receive = commands(fenced("README.md", "", 0))
    assert serve[:2] == [".venv/bin/s2s", "serve"] and send[1] == "send" and receive[1] == "receive"
    argv = serve[2:]
    at = argv.index("--port")
    del argv[at:at + 2]  # a free port instead of 8080
    with ServerProcess(*argv) as srv:
        local = {"http://localhost:8080/nifi": srv.url}
        files = {"README.md": str(ROOT / "README.md")}
        assert cli.main([substituted(a, local) if "localhost" in a else files.get(a, a) for a in send[1:]]) == 0
        assert srv.admin.queued("to-spark") == 1
        code = substituted(fenced("README.md", "python", 0), {**local, "/tmp/chk": str(tmp_path / "chk")})
        scope: dict[str, Any] = {"spark": spark}
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the page's own example
        assert not scope["query"].isActive and scope["query"].exception() is None
        # the pipeline ended: what was sent went through Spark once and waits in 'done', nowhere else
        assert srv.admin.queued("to-spark") == 0 and srv.admin.queued("from-spark") == 0
        out = tmp_path / "out"
        recv = [substituted(a, local) if "localhost" in a else a for a in receive[1:]]
        recv[recv.index("--out") + 1] = str(out)
        assert cli.main(recv) == 0
        written = [p for p in out.iterdir() if not p.name.endswith(".attributes.json")]
        assert [p.read_bytes() for p in written] == [(ROOT / "README.md").read_bytes()]
        assert srv.admin.queued("done") == 0


@pytest.fixture(scope="module")
def tls_cluster() -> Any:
    with ServerProcess("--input-port", "from-spark", "--output-port", "to-spark", tls=True, nodes=2) as srv:
        yield srv


def _tls(srv: ServerProcess) -> dict[str, str]:
    return {NIFI_URLS: ",".join(srv.urls)}


def test_spark_page_read_example(spark: Any, tls_cluster: ServerProcess, tmp_path: Path) -> None:
    srv = tls_cluster
    srv.admin.reset()
    for node in (0, 1):
        srv.admin.enqueue("to-spark", [({"filename": f"f{node}-{i}"}, f"body {node}-{i}") for i in range(5)],
                          node=node)
    code = substituted(fenced("docs/spark.md", "python", 0), {
        **_tls(srv),
        "s3://bucket/staging/q1": str(tmp_path / "staging"),
        "/etc/spark/client.p12": str(srv.client_p12),
        "/etc/spark/ca.pem": str(srv.ca),
        "/data/out": str(tmp_path / "out"),
        "/chk/q1": str(tmp_path / "chk"),
    })
    scope: dict[str, Any] = {"spark": spark, "pw": srv.client_p12_password}
    exec(compile(code, "docs/spark.md", "exec"), scope)  # noqa: S102 - the page's own example
    query = scope["query"]
    def rows_read() -> int:
        assert query.exception() is None, query.exception()
        return sum(p["numInputRows"] for p in query.recentProgress)

    try:
        wait_for(lambda: rows_read() >= 10, 90, "the query to read the 10 FlowFiles")
    finally:
        query.stop()
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.filename, r.body) for r in got) == sorted(
        (f"f{n}-{i}", f"body {n}-{i}") for n in (0, 1) for i in range(5))
    assert srv.admin.queued("to-spark") == 0


def test_spark_sink_page_examples(spark: Any, tls_cluster: ServerProcess, tmp_path: Path) -> None:
    srv = tls_cluster
    srv.admin.reset()
    code = substituted(fenced("docs/spark-sink.md", "python", 0), {
        **_tls(srv),
        '"client.p12"': repr(str(srv.client_p12)),
        '"..."': repr(srv.client_p12_password),
        '"ca.pem"': repr(str(srv.ca)),
        "/chk/q1": str(tmp_path / "chk"),
    })
    assert srv.client_p12_password and srv.client_p12_password not in fenced("docs/spark-sink.md", "python", 0)
    df = spark.readStream.format("rate").option("rowsPerSecond", 20).load().selectExpr("value AS id")
    scope: dict[str, Any] = {"spark": spark, "df": df}
    exec(compile(code, "docs/spark-sink.md", "exec"), scope)  # noqa: S102 - the page's own example
    query = scope["query"]
    try:
        # the batch write ran to its end inside the block; the streaming query keeps sending
        wait_for(lambda: query.exception() is None and sum(srv.admin.queued("from-spark", node=k) for k in (0, 1))
                 >= 105, 90, "the streaming query's first rows next to the batch write's 100")
    finally:
        query.stop()
    assert query.exception() is None
    ffs = [ff for k in (0, 1) for ff in srv.admin.flowfiles("from-spark", node=k, drain=True)]
    batch = [ff for ff in ffs if ff["attributes"]["spark.query.id"].startswith("write-")]
    stream = [ff for ff in ffs if not ff["attributes"]["spark.query.id"].startswith("write-")]
    assert len(batch) == 100
    assert stream and all(ff["attributes"]["mime.type"] == "application/json" for ff in stream)
