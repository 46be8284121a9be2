"""Apache Avro Java (the library NiFi's AvroReader and AvroRecordSetWriter are built on) as a test oracle.

``build_java_avro(tmpdir)`` compiles ``tests/java/AvroTool.java`` with ``javac`` against the jars inside
pyspark's ``jars/`` folder (Avro 1.12, Jackson, slf4j-api, commons-compress and the codec libraries) and
returns a ``JavaAvro``. Its calls go to one JVM per ``JavaAvro`` (``AvroTool serve``: one JSON command per
line on its stdin, one JSON answer per line on its stdout, payloads in base64), started on the first call
and ended by ``close()``; a JVM that died is started again on the next call.

Values travel as "typed JSON", decided by the schema (AvroTool.java's header has the full table):
null; boolean; int/long -> int; float/double -> float (a float as its exact float32 value), non-finite as
"NaN", "Infinity", "-Infinity"; string; bytes/fixed -> lowercase hex; decimal -> exact string
(BigDecimal.toPlainString); date -> "yyyy-mm-dd"; time-millis/-micros -> microseconds of the day;
timestamp-millis/-micros, local-timestamp-millis/-micros -> microseconds since the epoch (UTC); uuid ->
string; enum -> symbol; record -> dict; array -> list; map -> dict; a union -> None, its branch's value,
or ``{"@branch": i, "value": v}`` when it has more than one non-null branch (always so when reading).
When writing, a union's branch may be named with ``{"@branch": i, "value": v}``, else the first non-null
branch that takes the value is used; a decimal is a string (exact; an integer is taken too, a JSON number
with a fraction is refused); a record's missing field takes its default. ``Decimal`` (as its string),
``bytes`` (as hex) and non-finite floats (as their names) are spelled for you. A schema is a dict (a list
for a top-level union) or its JSON text. A refusal raises ``JavaAvroError`` with Java's "Class: message".
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Self

# an Avro schema: as parsed JSON (a dict, or a list for a union) or as its JSON text
SchemaLike = Mapping[str, Any] | Sequence[Any] | str

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "AvroTool.java"

# the jars AvroTool needs from pyspark's jars/ folder: (file name pattern, needed). Avro's own needs
# are Jackson and commons-compress; slf4j-api, commons-io and commons-lang3 are their dependencies;
# snappy-java, xz and zstd-jni are the optional codecs (each codec works where its jar is there).
JARS: tuple[tuple[str, bool], ...] = (
    (r"avro-\d[\w.-]*\.jar", True),
    (r"jackson-core-\d[\w.-]*\.jar", True),
    (r"jackson-databind-\d[\w.-]*\.jar", True),
    (r"jackson-annotations-\d[\w.-]*\.jar", True),
    (r"slf4j-api-\d[\w.-]*\.jar", True),
    (r"commons-compress-\d[\w.-]*\.jar", True),
    (r"commons-io-\d[\w.-]*\.jar", False),
    (r"commons-lang3-\d[\w.-]*\.jar", False),
    (r"snappy-java-\d[\w.-]*\.jar", False),
    (r"xz-\d[\w.-]*\.jar", False),
    (r"zstd-jni-\d[\w.-]*\.jar", False),
)

# a short-lived, single-threaded helper JVM: no C2, one GC thread
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


class JavaAvroError(RuntimeError):
    """Avro Java refused: ``stderr`` is what AvroTool says on stderr ("Class: message; caused by: ..."),
    ``trace`` the Java stack trace where there is one."""

    def __init__(self, message: str, stderr: str, trace: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr
        self.trace = trace


def _wire(value: Any) -> Any:
    """``value`` with the Python conveniences spelled as typed JSON (Decimal, bytes, non-finite floats)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wire(v) for v in value]
    return value


class JavaAvro:
    """Avro Java in one long-lived JVM. Thread-safe (one call at a time); ``close()`` ends the JVM."""

    def __init__(self, classes_dir: str | os.PathLike[str], classpath: str | Sequence[str],
                 java: str | None = None) -> None:
        self.classes_dir = Path(classes_dir)
        jars = classpath.split(os.pathsep) if isinstance(classpath, str) else list(classpath)
        self.classpath = os.pathsep.join([str(self.classes_dir), *(str(j) for j in jars if j)])
        self.java = java or find_java_tool("java")
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    # -- the operations ---------------------------------------------------------------------------

    def read(self, data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A container file: its header ``{"schema": writer schema, "codec": name}`` and its records."""
        answer = self._call({"op": "read", "data": base64.b64encode(data).decode("ascii")})
        return answer["header"], answer["records"]

    def read_bare(self, schema: SchemaLike, data: bytes) -> list[dict[str, Any]]:
        """Bare concatenated binary datums of ``schema`` (no container), read until the end."""
        answer = self._call({"op": "read-bare", "schema": _schema(schema),
                             "data": base64.b64encode(data).decode("ascii")})
        records: list[dict[str, Any]] = answer["records"]
        return records

    def write(self, schema: SchemaLike, records: Sequence[Any], codec: str = "null") -> bytes:
        """A container file of ``records`` (typed JSON) with ``codec`` (null, deflate, snappy, bzip2, xz,
        zstandard)."""
        answer = self._call({"op": "write", "schema": _schema(schema), "records": _wire(list(records)),
                             "codec": codec})
        return base64.b64decode(answer["data"])

    def write_bare(self, schema: SchemaLike, records: Sequence[Any]) -> bytes:
        """``records`` as bare concatenated datums, by a blocking binary encoder (as NiFi's
        WriteAvroResultWithExternalSchema writes them)."""
        answer = self._call({"op": "write-bare", "schema": _schema(schema), "records": _wire(list(records))})
        return base64.b64decode(answer["data"])

    def avro_version(self) -> str:
        """The Avro Java release that answers (from its jar's manifest)."""
        return str(self._call({"op": "ping"})["avro"])

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``AvroTool ARGS`` in a JVM of its own (the command-line form), its output as text."""
        return subprocess.run([self.java, *JVM_OPTIONS, "-cp", self.classpath, "AvroTool", *args],
                              capture_output=True, text=True, encoding="utf-8", timeout=timeout, check=False)

    # -- the JVM ----------------------------------------------------------------------------------

    def _start(self) -> subprocess.Popen[bytes]:
        # open for the JVM's life: _stop() closes it
        self._stderr = tempfile.TemporaryFile(prefix="avrotool-stderr-")  # noqa: SIM115
        self._proc = subprocess.Popen([self.java, *JVM_OPTIONS, "-cp", self.classpath, "AvroTool", "serve"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        return self._proc

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def _call(self, command: dict[str, Any]) -> dict[str, Any]:
        line = json.dumps(command, allow_nan=False, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else None
            if proc is None:
                self._stop()
                proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
                reply = proc.stdout.readline()
            except OSError:
                reply = b""
            if not reply:
                proc.wait(timeout=30)
                err = self._stderr_text()
                self._stop()
                raise JavaAvroError(f"the Avro Java JVM ended (exit status {proc.returncode}): {err.strip()}",
                                    err)
        answer: dict[str, Any] = json.loads(reply)
        if not answer.get("ok"):
            raise JavaAvroError(f"Avro Java: {answer['error']}", answer["error"], answer.get("trace", ""))
        return answer

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def close(self) -> None:
        """End the JVM (the next call starts another)."""
        with self._lock:
            self._stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _schema(schema: SchemaLike) -> Any:
    """A schema as the command carries it: its JSON text as is, else as JSON (a record, a union...)."""
    if isinstance(schema, str):
        return schema
    return dict(schema) if isinstance(schema, Mapping) else list(schema)


def find_java_tool(name: str) -> str:
    """``name`` (java, javac) from JAVA_HOME/bin, else from PATH; a clear error where there is none."""
    home = os.environ.get("JAVA_HOME", "").strip()
    if home:
        candidate = Path(home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(
            f"{name} not found (JAVA_HOME={home or 'unset'}, nor on PATH): the test suite compiles and runs "
            "tests/java/AvroTool.java against Apache Avro Java, so it needs a Java 17+ JDK (javac, not only "
            "a JRE); install one, e.g. apt-get install openjdk-17-jdk-headless")
    return found


def pyspark_jars_dir() -> Path:
    """pyspark's ``jars/`` folder (the Avro, Jackson and codec jars come from there)."""
    import pyspark

    jars = Path(os.path.dirname(pyspark.__file__)) / "jars"
    if not jars.is_dir():
        raise RuntimeError(f"pyspark's jars folder {jars} is missing: is pyspark installed in full?")
    return jars


def avro_classpath(jars_dir: Path | None = None) -> list[str]:
    """The jars AvroTool needs, found by name in ``jars_dir`` (pyspark's by default)."""
    jars_dir = jars_dir or pyspark_jars_dir()
    names = sorted(p.name for p in jars_dir.glob("*.jar"))
    found: list[str] = []
    missing: list[str] = []
    for pattern, needed in JARS:
        matches = [n for n in names if re.fullmatch(pattern, n)]
        if matches:
            found.append(str(jars_dir / matches[-1]))
        elif needed:
            missing.append(pattern)
    if missing:
        raise RuntimeError(f"{jars_dir} has no jar matching {', '.join(missing)}: Avro Java cannot be run")
    return found


def build_java_avro(tmpdir: str | os.PathLike[str]) -> JavaAvro:
    """Compile AvroTool.java into ``tmpdir`` against pyspark's jars; the JavaAvro that runs it."""
    javac = find_java_tool("javac")
    java = find_java_tool("java")
    classpath = avro_classpath()
    out = Path(tmpdir)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [javac, "-encoding", "UTF-8", "--release", "17", "-nowarn", "-d", str(out),
           "-cp", os.pathsep.join(classpath), str(JAVA_SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"javac failed (exit status {done.returncode}) on {JAVA_SOURCE}:\n"
                           f"{done.stdout}{done.stderr}")
    return JavaAvro(out, classpath, java=java)
