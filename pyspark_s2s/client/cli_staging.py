"""Where ``s2s receive`` writes FlowFiles: one transaction's files in the ``--out`` directory.

Owns: the file names (the ``uuid`` attribute, or with ``--name-by filename`` the ``filename``
attribute made safe, never leaving the directory; then a generated ``<transaction>-<n>``), the
temporary ``.<name>.<transaction>.partial`` files, writing content and attributes JSON with
fsync, and the renames (and the directory's fsync) that publish them before the commit, or
their removal when the transaction is canceled (:class:`Staging`).

Must not import: anything but the standard library (the ``s2s`` dispatcher imports the command
modules to register them; they must stay cheap).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

__all__ = ["ATTRIBUTES_SUFFIX", "MAX_NAME_BYTES", "MAX_UUID_BYTES", "Staging", "WriteFailed", "file_name_for",
           "valid_uuid"]

#: longest name written in the output directory: its temporary attributes file name
#: (``.<name>.attributes.json.<transaction>.partial``) must stay under 255 bytes
MAX_UUID_BYTES = MAX_NAME_BYTES = 180
#: suffix of the attributes file written next to each content file
ATTRIBUTES_SUFFIX = ".attributes.json"


def valid_uuid(value: str | None) -> bool:
    """True when ``value`` is safe as a file name in the output directory."""
    if not value or value in (".", ".."):
        return False
    if "/" in value or "\\" in value or "\x00" in value or ".." in value:
        return False
    if value.startswith("."):
        return False
    return len(value.encode("utf-8", "surrogatepass")) <= MAX_UUID_BYTES


def _fit(name: str) -> str:
    """``name`` cut to MAX_NAME_BYTES of UTF-8, keeping a short extension."""
    if len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext.encode("utf-8", "surrogatepass")) > 16:
        stem, ext = name, ""
    suffix = f".{ext}" if ext else ""
    room = MAX_NAME_BYTES - len(suffix.encode("utf-8", "surrogatepass"))
    cut = stem.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return cut + suffix


def file_name_for(filename: str | None) -> str | None:
    """A safe file name from a ``filename`` attribute, or None when nothing usable is left.

    Path separators (``/``, ``\\``), NUL and other control characters become ``_``, so the
    name never leaves the output directory; a leading ``.`` gets a ``_`` in front (no hidden
    files, no clash with the temporary ``.…partial`` files); a name of dots only is unusable;
    a name longer than 180 bytes is shortened, keeping its extension.
    """
    if not filename:
        return None
    name = "".join("_" if ch in "/\\" or ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in filename)
    if not name.strip(". "):
        return None
    if name.startswith("."):
        name = "_" + name
    return _fit(name)


def _numbered(name: str, k: int) -> str:
    """``report.pdf`` -> ``report-1.pdf`` (the k-th alternative of a taken name)."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    tail = f"-{k}" + (f".{ext}" if ext else "")
    room = MAX_NAME_BYTES - len(tail.encode("utf-8", "surrogatepass"))
    return stem.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore") + tail


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: str, chunks: Iterator[bytes]) -> int:
    """Write ``chunks`` to ``path`` (created/truncated) and fsync it; returns bytes written."""
    total = 0
    with open(path, "wb") as fh:
        for chunk in chunks:
            fh.write(chunk)
            total += len(chunk)
        fh.flush()
        os.fsync(fh.fileno())
    return total


class WriteFailed(Exception):
    """Writing a received FlowFile to disk failed (the transaction is canceled)."""

    def __init__(self, path: str, exc: OSError) -> None:
        super().__init__(f"cannot write {path}: {exc.strerror or exc}")


class Staging:
    """Files of one receive transaction: named, written under temporary names, renamed before commit.

    Naming (``--name-by``): ``uuid`` writes DIR/<uuid> and overwrites a file of that name from
    an earlier transaction (NiFi delivers a FlowFile again after a failed commit: receiving
    stays idempotent). ``filename`` writes DIR/<filename attribute>, made safe by
    :func:`file_name_for`, and never overwrites: a name already in DIR or in this transaction
    becomes ``name-1.ext``, ``name-2.ext``, ... (so does a name ending in ``.attributes.json``,
    which would pass for the attributes of another file). Either way a FlowFile without a usable name
    falls back (filename -> uuid -> generated ``<transaction>-<n>``) and its data is kept.
    """

    def __init__(self, out_dir: str, tx_id: str, name_by: str = "uuid") -> None:
        self.out_dir = out_dir
        self.tx_id = tx_id
        self.name_by = name_by
        self.pending: list[tuple[str, str]] = []  # (temporary, final)
        self.taken: set[str] = set()  # final names (content and attributes) of this transaction
        self.generated = 0  # FlowFiles written under a generated name

    def _tmp(self, final_name: str) -> str:
        return os.path.join(self.out_dir, f".{final_name}.{self.tx_id}.partial")

    def _free(self, name: str, overwrite: bool) -> bool:
        names = (name, name + ATTRIBUTES_SUFFIX)
        if name.endswith(ATTRIBUTES_SUFFIX) or any(n in self.taken for n in names):
            return False
        return overwrite or not any(os.path.lexists(os.path.join(self.out_dir, n)) for n in names)

    def name_for(self, attributes: dict[str, str]) -> str:
        """The final name of the next FlowFile (reserved for this transaction)."""
        uuid = attributes.get("uuid")
        candidates: list[tuple[str, bool]] = []  # (name, may overwrite an earlier transaction's file)
        if self.name_by == "filename":
            by_filename = file_name_for(attributes.get("filename"))
            if by_filename:
                candidates.append((by_filename, False))
        if uuid and valid_uuid(uuid):
            candidates.append((uuid, self.name_by == "uuid"))
        if not candidates:
            self.generated += 1
            candidates.append((f"{self.tx_id}-{self.generated}", True))
        name, overwrite = candidates[0]
        k = 0
        while not self._free(name, overwrite):
            k += 1
            name = _numbered(candidates[0][0], k)
            overwrite = False
        self.taken.update((name, name + ATTRIBUTES_SUFFIX))
        return name

    def write(self, name: str, attributes: dict[str, str], chunks: Iterator[bytes]) -> int:
        content_tmp = self._tmp(name)
        attrs_tmp = self._tmp(name + ATTRIBUTES_SUFFIX)
        self.pending.append((content_tmp, os.path.join(self.out_dir, name)))
        try:
            size = _write_durably(content_tmp, chunks)
        except OSError as exc:
            raise WriteFailed(content_tmp, exc) from None
        self.pending.append((attrs_tmp, os.path.join(self.out_dir, name + ATTRIBUTES_SUFFIX)))
        text = json.dumps(attributes, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        try:
            _write_durably(attrs_tmp, iter([text.encode("utf-8")]))
        except OSError as exc:
            raise WriteFailed(attrs_tmp, exc) from None
        return size

    def publish(self) -> None:
        """Rename every file to its final name and fsync the directory (before the commit)."""
        published: list[str] = []
        for tmp, final in self.pending:
            try:
                os.replace(tmp, final)
            except OSError as exc:
                # the transaction is canceled and NiFi delivers these FlowFiles again: leave
                # nothing of it behind
                for path in published:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                raise WriteFailed(final, exc) from None
            published.append(final)
        try:
            _fsync_dir(self.out_dir)
        except OSError as exc:
            raise WriteFailed(self.out_dir, exc) from None

    def discard(self) -> None:
        """Remove the temporary files (the transaction is canceled)."""
        for tmp, _final in self.pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
