"""An SWF log as columns (one numpy array per field), read by a C parser when the file allows.

Why: the careful reader (`hpcpredict.logs.swf`) converts 18 fields per line in Python and builds one
record object per job: ~2.5-5 s for CEA-Curie's 312,826 lines, most of `hpcpredict info`.
numpy's C text reader (`numpy.loadtxt`) reads the same numbers into arrays in ~0.2 s (pandas'
C engine is as fast but costs 0.2 s more to import).

The fast path takes a file only when nothing in it is unusual, and otherwise hands the whole file
to the careful reader, so every error, skipped line, body comment and blank line is reported as
before, with its line number. The fast path requires:

* the header: comment lines (and blank lines) at the top, no carriage return, typed values
  that parse;
* the body: only the bytes ``0-9 - . space tab newline`` (so no comment, no ``+``, no exponent,
  no ``nan``/``inf``, no ``_``, nothing non-ASCII), no blank line, and every line exactly 18
  fields that numpy converts: the 15 integer fields as int64 (``3.``, ``5-3``, ``-`` or an
  integer beyond int64 fail), the three decimal fields as float64 with the correctly rounded
  conversion Python's ``float()`` uses, finite.

Anything else (an empty file, a header-only file, a corrupt .gz included) goes to the careful
reader. `tests/test_swf_table.py` checks with hypothesis, on valid and malformed files, that
the fast path never accepts what the careful reader rejects and never differs in a value.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from dataclasses import dataclass, field

import numpy as np

from hpcpredict.logs.swf import (
    SWF_FIELDS,
    BytesCallback,
    SwfHeader,
    SwfLog,
    SwfRecord,
    parse_header,
    read_swf,
)

_FLOAT_FIELDS = ("avg_cpu_s", "used_memory_kb", "requested_memory_kb")
_FLOAT_COLUMNS = tuple(SWF_FIELDS.index(name) for name in _FLOAT_FIELDS)
_BODY_BYTES = b"0123456789-. \t\n"  # every byte the fast path's body may hold
_BLANK_LINE = re.compile(rb"\n[ \t]*\n|\n[ \t]+\Z")  # (the first line is not blank: a job's)
# One job line: numpy's C reader converts integers strictly (no '.', nothing beyond int64) and
# decimals with the correctly rounded conversion Python's float() uses.
_ROW = np.dtype([(name, np.float64 if name in _FLOAT_FIELDS else np.int64) for name in SWF_FIELDS])
_GZIP_MAGIC = b"\x1f\x8b"
_READ_CHUNK_BYTES = 1 << 16  # a progress report every 64 KiB read (a few ms)
_ENCODING = "utf-8"
_ENCODING_ERRORS = "surrogateescape"


@dataclass
class SwfTable:
    """A whole SWF file as columns: `columns[name]` is one array per SWF field (`SWF_FIELDS`),
    int64 or float64 (object for an integer beyond int64, which only the careful reader takes);
    the rest as `swf.SwfLog` has it."""

    path: str | None
    header: SwfHeader
    columns: dict[str, np.ndarray]
    skipped_lines: list[tuple[int, str]] = field(default_factory=list)
    body_comments: list[tuple[int, str]] = field(default_factory=list)
    blank_lines: list[int] = field(default_factory=list)
    fast: bool = False  # read by the C parser (True) or by the careful reader

    def __len__(self) -> int:
        return len(self.columns[SWF_FIELDS[0]])

    def records(self) -> list[SwfRecord]:
        """The rows as `SwfRecord`s with Python numbers, as `swf.read_swf` returns them."""
        values = [self.columns[name].tolist() for name in SWF_FIELDS]
        return list(map(SwfRecord, *values))

    @classmethod
    def from_log(cls, log: SwfLog) -> SwfTable:
        return cls(
            path=log.path,
            header=log.header,
            columns=columns_of(log.records),
            skipped_lines=log.skipped_lines,
            body_comments=log.body_comments,
            blank_lines=log.blank_lines,
        )


def columns_of(records: list[SwfRecord]) -> dict[str, np.ndarray]:
    """One array per SWF field of `records` (int64, or object where an integer needs more)."""
    columns: dict[str, np.ndarray] = {}
    for index, name in enumerate(SWF_FIELDS):
        values = [getattr(record, name) for record in records]
        if index in _FLOAT_COLUMNS:
            columns[name] = np.array(values, dtype=np.float64)
            continue
        try:
            columns[name] = np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: the careful reader keeps Python's integers
            columns[name] = np.array(values, dtype=object)
    return columns


def read_swf_table(
    path: str | os.PathLike[str],
    *,
    lenient: bool = False,
    progress: BytesCallback | None = None,
) -> SwfTable:
    """Read `path` (plain or gzip) as columns: by the C parser when the file is plain job lines
    (module doc), else by `swf.read_swf` with every diagnosis it gives."""
    path = os.fspath(path)
    offsets: list[int] = []  # bytes read so far after each chunk
    try:
        data = _read_bytes(path, offsets)
    except (OSError, EOFError, ValueError):  # unreadable or corrupt: the careful reader says how
        data = None
    table = parse_swf_fast(data, path=path) if data is not None else None
    if table is None:  # (it reports its own progress, from the start)
        return SwfTable.from_log(read_swf(path, lenient=lenient, progress=progress))
    if progress is not None:  # told once the fast path has the file, so that it never goes back
        for done in offsets:
            progress(done)
    return table


def _read_bytes(path: str, offsets: list[int]) -> bytes:
    """The file's bytes, decompressed if gzip; `offsets` gets the bytes read from disk after
    each chunk (the progress the careful reader would report: compressed bytes for a .gz)."""
    chunks = []
    with open(path, "rb") as raw:
        while chunk := raw.read(_READ_CHUNK_BYTES):
            chunks.append(chunk)
            offsets.append((offsets[-1] if offsets else 0) + len(chunk))
    data = b"".join(chunks)
    return gzip.decompress(data) if data[: len(_GZIP_MAGIC)] == _GZIP_MAGIC else data


def parse_swf_fast(data: bytes, *, path: str | None = None) -> SwfTable | None:
    """The table of an SWF file's (decompressed) bytes, or None when the fast path must not
    decide (module doc): then the careful reader must read the file."""
    split = _split_header(data)
    if split is None:
        return None
    comment_lines, comment_line_nos, blank_lines, body_start = split
    body = data[body_start:]
    if not body or body.translate(None, _BODY_BYTES):
        return None
    columns = _parse_body(body)
    if columns is None:
        return None
    try:
        header = parse_header(comment_lines, path=path, line_nos=comment_line_nos)
    except ValueError:  # a bad typed header value: the careful reader raises it
        return None
    return SwfTable(path=path, header=header, columns=columns, blank_lines=blank_lines, fast=True)


def _split_header(data: bytes) -> tuple[list[str], list[int], list[int], int] | None:
    """The header's comment lines with their numbers, its blank lines and where the first job
    line starts, classified as the careful reader classifies them; None if a carriage return
    (another line ending) is in the way."""
    comments: list[str] = []
    comment_line_nos: list[int] = []
    blank_lines: list[int] = []
    position, line_no = 0, 0
    while position < len(data):
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end + 1
        raw = data[position:end]
        if b"\r" in raw:
            return None
        text = raw.decode(_ENCODING, _ENCODING_ERRORS)
        stripped = text.strip()
        if stripped and not stripped.startswith(";"):
            break
        line_no += 1
        if stripped:
            comments.append(text.rstrip("\r\n"))
            comment_line_nos.append(line_no)
        else:
            blank_lines.append(line_no)
        position = end
    return comments, comment_line_nos, blank_lines, position


def _parse_body(body: bytes) -> dict[str, np.ndarray] | None:
    """The 18 columns of job lines made only of `_BODY_BYTES`, or None (module doc)."""
    if _BLANK_LINE.search(body):  # numpy skips blank lines; the careful reader records them
        return None
    try:
        rows = np.loadtxt(io.BytesIO(body), dtype=_ROW, comments=None, ndmin=1)
    except ValueError:  # a field that is not its type's number, or not 18 fields on a line
        return None
    columns = {name: rows[name] for name in SWF_FIELDS}  # views of the rows: no copy
    if not all(np.isfinite(columns[name]).all() for name in _FLOAT_FIELDS):
        return None  # a decimal beyond the float range: the careful reader says which
    return columns
