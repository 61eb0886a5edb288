"""Read and write the Standard Workload Format (SWF) of the Parallel Workloads Archive.

An SWF file is a header of comment lines (starting with ';', many of them `Key: value` pairs such
as `MaxProcs: 100`) followed by one line per job of 18 whitespace-separated numbers, `-1` meaning
"missing" (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html). This module only parses:
it returns every record as written, and deciding which jobs to simulate is `hpcpredict.logs.cleaning`'s
job (docs/method.md §10), so that every dropped job is counted in one place.

Design choices, each for a reason:

* **Errors name the line and the field.** `SwfFormatError` carries `path`, `line_no`, `field_no`
  and `message` (modelled on `json.JSONDecodeError`), so the CLI prints
  ``KTH-SP2.swf.gz:1042: field 4 (run_s): expected an integer, got '1.5e3'`` and tests assert the
  line number. In lenient mode a bad line is skipped *and recorded* as ``(line_no, reason)``;
  nothing is ever dropped silently.
* **Strict numbers.** Integer fields accept ``[+-]digits`` and the three float fields accept plain
  decimal or exponent notation, ASCII only. Python's `int()`/`float()` alone would also accept
  ``1_000``, non-ASCII digits, ``nan`` and ``inf``, which no archive log contains and which would
  break the write -> read round trip.
* **Fast path, slow path.** A line made only of digits, signs, dots and whitespace is converted
  straight with `int()`/`float()` (the full 312,826-line CEA-Curie log parses in about 2 s); any
  other line, or one whose conversion fails, goes through the strict per-field check that builds
  the error message. The slow path is the specification; the fast path only skips work.
  Whole logs are read faster still by `hpcpredict.logs.swf_table` (numpy's C reader into columns),
  which hands any file that is not plain job lines to this reader.
* **Streaming.** `iter_swf` reads the header eagerly (it is needed before the first job, e.g. for
  MaxProcs) and then yields records one at a time, so memory stays flat whatever the log's size.
* **Comment and blank lines after the header** are legal but not part of the header: they are
  kept with their line numbers (`SwfReader.body_comments`, `SwfReader.blank_lines`) rather than
  being mixed into the header that a writer reproduces.
* **Text is UTF-8 with ``surrogateescape``**, so a header with stray bytes (some archive logs have
  them) never stops a read and is written back byte for byte.
"""

from __future__ import annotations

import gzip
import io
import math
import operator
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from dataclasses import dataclass, field
from typing import IO, TextIO

SWF_FIELDS: tuple[str, ...] = (
    "job_id",
    "submit_s",
    "wait_s",
    "run_s",
    "allocated_procs",
    "avg_cpu_s",
    "used_memory_kb",
    "requested_procs",
    "requested_time_s",
    "requested_memory_kb",
    "status",
    "user_id",
    "group_id",
    "executable_id",
    "queue_id",
    "partition_id",
    "preceding_job_id",
    "think_time_s",
)
"""The 18 SWF fields in file order, units in the names (SWF definition, fields 1-18)."""

FIELD_COUNT = len(SWF_FIELDS)
MISSING = -1  # the SWF spec's value for "not recorded"

# Zero-based indexes of the fields that real logs write with decimals (SDSC-BLUE: "186.92").
_FLOAT_FIELD_INDEXES = frozenset(
    SWF_FIELDS.index(name) for name in ("avg_cpu_s", "used_memory_kb", "requested_memory_kb")
)

# The strict patterns of the slow path. On an ASCII line without '_', int() accepts exactly
# _INT_PATTERN and float() accepts _FLOAT_PATTERN plus nan/inf, which the fast path rejects.
_INT_PATTERN = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_PATTERN = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_HEADER_PAIR = re.compile(r";\s*([A-Z][A-Za-z0-9_]*)\s*:\s*(.*?)\s*", re.ASCII)

_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)  # corrupt or truncated .gz
_PROGRESS_EVERY_LINES = 8192  # how often `on_bytes` is called: often enough for a smooth bar
_GZIP_MAGIC = b"\x1f\x8b"
_ENCODING = "utf-8"
_ENCODING_ERRORS = "surrogateescape"

# Minimum column widths for writing, close to the archive's own layout; wider values just widen.
_COLUMN_WIDTHS = (6, 9, 7, 7, 5, 8, 7, 5, 7, 7, 2, 4, 4, 4, 3, 3, 6, 6)

BytesCallback = Callable[[int], None]
"""Called with the number of bytes read so far (compressed bytes for a .gz file)."""


@dataclass(frozen=True, slots=True)
class SwfRecord:
    """One job line of an SWF file, exactly as written (`MISSING` = -1 where not recorded)."""

    job_id: int
    submit_s: int  # relative to the header's UnixStartTime
    wait_s: int
    run_s: int
    allocated_procs: int
    avg_cpu_s: float
    used_memory_kb: float
    requested_procs: int
    requested_time_s: int
    requested_memory_kb: float
    status: int  # 1 completed, 0 failed, 5 cancelled; other codes in some logs
    user_id: int
    group_id: int
    executable_id: int
    queue_id: int
    partition_id: int
    preceding_job_id: int
    think_time_s: int


_record_values = operator.attrgetter(*SWF_FIELDS)


class SwfFormatError(ValueError):
    """A line of an SWF file that cannot be read, located precisely enough to fix it by hand.

    Attributes: `message` (what is wrong), `path` (as given, or None), `line_no` (1-based),
    `field_no` (1-based SWF field number, or None when the whole line is at fault), `skippable`
    (False when the fault is the whole file, e.g. corrupt gzip or no content, so that the CLI does
    not suggest --lenient, which skips bad lines and cannot help there).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None,
        line_no: int,
        field_no: int | None = None,
        skippable: bool = True,
    ) -> None:
        self.message = message
        self.skippable = skippable
        self.path = path
        self.line_no = line_no
        self.field_no = field_no
        super().__init__(str(self))

    @property
    def reason(self) -> str:
        """The error without its location: what lenient mode records next to the line number."""
        if self.field_no is None:
            return self.message
        return f"field {self.field_no} ({SWF_FIELDS[self.field_no - 1]}): {self.message}"

    def __str__(self) -> str:
        return f"{self.path or '<swf>'}:{self.line_no}: {self.reason}"

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments defeat BaseException's default pickling; multiprocessing needs it.
        return (
            _rebuild_error,
            (self.message, self.path, self.line_no, self.field_no, self.skippable),
        )


def _rebuild_error(
    message: str, path: str | None, line_no: int, field_no: int | None, skippable: bool = True
) -> SwfFormatError:
    return SwfFormatError(
        message, path=path, line_no=line_no, field_no=field_no, skippable=skippable
    )


@dataclass(frozen=True)
class SwfHeader:
    """The comment lines before the first job, raw and interpreted.

    `lines` are the comment lines verbatim (without newline), in order, so a writer reproduces
    them. `entries` maps every `Key: value` key to *all* its values in file order, because keys
    such as Note, Queue, Partition and Information repeat; continuation lines without a key (the
    Curie log's second Note line, KTH's second Information URL) appear only in `lines`. The typed
    accessors are None when the key is absent.
    """

    lines: tuple[str, ...] = ()
    entries: dict[str, tuple[str, ...]] = field(default_factory=dict)
    max_procs: int | None = None
    max_nodes: int | None = None
    unix_start_time: int | None = None
    time_zone: int | None = None  # seconds east of UTC in the archive's (old) convention
    time_zone_string: str | None = None

    def get(self, key: str) -> str | None:
        """The first value of `key`, or None when absent (see `entries` for repeated keys)."""
        values = self.entries.get(key)
        return values[0] if values else None


# Header keys with a typed accessor: attribute name and whether the value is an integer.
_TYPED_HEADER_KEYS: dict[str, tuple[str, bool]] = {
    "MaxProcs": ("max_procs", True),
    "MaxNodes": ("max_nodes", True),
    "UnixStartTime": ("unix_start_time", True),
    "TimeZone": ("time_zone", True),
    "TimeZoneString": ("time_zone_string", False),
}


def parse_header(
    lines: Iterable[str], *, path: str | None = None, line_nos: Iterable[int] | None = None
) -> SwfHeader:
    """Interpret comment lines as an SWF header.

    A typed key (MaxProcs, ...) whose value is not an integer, or that is repeated with a
    different value, raises `SwfFormatError` even in lenient mode: MaxProcs decides which jobs
    cleaning drops, so a guess here would silently change the simulated log.
    """
    lines = tuple(lines)
    numbers = tuple(line_nos) if line_nos is not None else tuple(range(1, len(lines) + 1))
    entries: dict[str, list[str]] = {}
    typed: dict[str, int | str] = {}
    for line_no, line in zip(numbers, lines):
        match = _HEADER_PAIR.fullmatch(line)
        if match is None:
            continue  # a free comment or a continuation line: kept in `lines` only
        key, value = match.group(1), match.group(2) or ""
        entries.setdefault(key, []).append(value)
        if key in _TYPED_HEADER_KEYS:
            attribute, is_int = _TYPED_HEADER_KEYS[key]
            if not is_int and not value:
                continue  # an empty TimeZoneString says nothing: the attribute stays None
            parsed = _parse_header_value(key, value, is_int, path=path, line_no=line_no)
            if attribute in typed and typed[attribute] != parsed:
                raise SwfFormatError(
                    f"header {key} repeated with a different value ({typed[attribute]!r}, then "
                    f"{parsed!r})",
                    path=path,
                    line_no=line_no,
                )
            typed[attribute] = parsed
    frozen_entries = {key: tuple(values) for key, values in entries.items()}
    return SwfHeader(lines=lines, entries=frozen_entries, **typed)  # type: ignore[arg-type]


def _parse_header_value(
    key: str, value: str, is_int: bool, *, path: str | None, line_no: int
) -> int | str:
    if not is_int:
        return value
    if _INT_PATTERN.fullmatch(value) is None:
        raise SwfFormatError(
            f"header {key}: expected an integer, got {value!r}", path=path, line_no=line_no
        )
    try:
        return int(value)
    except ValueError:  # beyond Python's int_max_str_digits: no real log has such a number
        raise SwfFormatError(
            f"header {key}: integer of {len(value)} digits is too long", path=path, line_no=line_no
        ) from None


@dataclass
class SwfLog:
    """A whole SWF file in memory: what `read_swf` returns.

    `skipped_lines` lists the job lines lenient mode skipped, as (line_no, reason); it is always
    empty in strict mode, where the first bad line raises instead.
    """

    path: str | None
    header: SwfHeader
    records: list[SwfRecord]
    skipped_lines: list[tuple[int, str]] = field(default_factory=list)
    body_comments: list[tuple[int, str]] = field(default_factory=list)
    blank_lines: list[int] = field(default_factory=list)


def _decompressed(raw: io.BufferedReader) -> IO[bytes]:
    if raw.peek(len(_GZIP_MAGIC))[: len(_GZIP_MAGIC)] == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return raw


def _text_stream(binary: IO[bytes]) -> TextIO:
    return io.TextIOWrapper(binary, encoding=_ENCODING, errors=_ENCODING_ERRORS)  # type: ignore[arg-type]


class SwfReader:
    """Streams one SWF file: `header` is read on opening, then iterating yields `SwfRecord`s.

    Use it as a context manager (or exhaust it) so the file is closed. It can be iterated once.
    While iterating, lenient mode appends skipped lines to `skipped_lines`; comment and blank
    lines after the header go to `body_comments` and `blank_lines`. `on_bytes` is called every
    few thousand lines and once at the end with the bytes read so far (compressed bytes for .gz,
    so the total is the file's size on disk).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lenient: bool = False,
        on_bytes: BytesCallback | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.lenient = lenient
        self.skipped_lines: list[tuple[int, str]] = []
        self.body_comments: list[tuple[int, str]] = []
        self.blank_lines: list[int] = []
        self._on_bytes = on_bytes
        self._raw = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        try:
            self._text = _text_stream(_decompressed(self._raw))
            self.header, first_job_line, first_job_line_no = self._read_header()
        except BaseException:
            self.close()
            raise
        self._records = self._iter_records(first_job_line, first_job_line_no)

    def __enter__(self) -> SwfReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[SwfRecord]:
        return self

    def __next__(self) -> SwfRecord:
        return next(self._records)

    def close(self) -> None:
        """Close the file; safe to call more than once."""
        self._raw.close()

    def _read_header(self) -> tuple[SwfHeader, str | None, int]:
        """Read comment lines up to the first job line, returned with its number for the loop."""
        comment_lines: list[str] = []
        comment_line_nos: list[int] = []
        line_no = 0
        first_job_line = None
        try:
            for line in self._text:
                line_no += 1
                stripped = line.strip()
                if not stripped:
                    self.blank_lines.append(line_no)
                elif stripped.startswith(";"):
                    comment_lines.append(line.rstrip("\r\n"))
                    comment_line_nos.append(line_no)
                else:
                    first_job_line = line
                    break
        except _GZIP_ERRORS as error:
            raise self._gzip_error(error, line_no + 1) from error
        if line_no == len(self.blank_lines):  # not one byte of content
            raise SwfFormatError(
                "empty file: no header and no job lines",
                path=self.path,
                line_no=max(line_no, 1),
                skippable=False,
            )
        header = parse_header(comment_lines, path=self.path, line_nos=comment_line_nos)
        return header, first_job_line, line_no

    def _gzip_error(self, error: Exception, line_no: int) -> SwfFormatError:
        return SwfFormatError(
            f"corrupt or truncated gzip data ({error})",
            path=self.path,
            line_no=line_no,
            skippable=False,
        )

    def _iter_records(self, first_job_line: str | None, first_line_no: int) -> Iterator[SwfRecord]:
        """The hot loop: one `str.split` and 18 conversions per line on the fast path."""
        line_no = first_line_no - 1
        on_bytes = self._on_bytes
        lines = self._text if first_job_line is None else chain((first_job_line,), self._text)
        try:
            for line in lines:
                line_no += 1
                fields = line.split()
                record = None
                if len(fields) == FIELD_COUNT and line.isascii() and "_" not in line:
                    try:
                        record = _record_from_fields(fields)
                    except ValueError:
                        pass  # e.g. "1.5" in an integer field: the slow path says which one
                if record is None:
                    record = self._slow_path(fields, line, line_no)
                if record is not None:
                    yield record
                if on_bytes is not None and line_no % _PROGRESS_EVERY_LINES == 0:
                    on_bytes(self._raw.tell())
        except _GZIP_ERRORS as error:
            raise self._gzip_error(error, line_no + 1) from error
        self._report_bytes()
        self.close()

    def _slow_path(self, fields: list[str], line: str, line_no: int) -> SwfRecord | None:
        """Classify a line the fast path did not take: blank, comment, valid, or bad."""
        if not fields:
            self.blank_lines.append(line_no)
            return None
        if fields[0].startswith(";"):
            self.body_comments.append((line_no, line.rstrip("\r\n")))
            return None
        try:
            return parse_fields(fields, path=self.path, line_no=line_no)
        except SwfFormatError as error:
            if not self.lenient:
                raise
            self.skipped_lines.append((line_no, error.reason))
            return None

    def _report_bytes(self) -> None:
        if self._on_bytes is not None and not self._raw.closed:
            self._on_bytes(self._raw.tell())


def _record_from_fields(f: list[str]) -> SwfRecord:
    """Convert 18 fields of an ASCII line without '_'; raise ValueError for the slow path.

    On such strings `int()` accepts exactly the strict integer pattern. `float()` also accepts
    "nan", "inf" and overflowing exponents: the sum of `x - x` is 0.0 only when all three are
    finite (inf - inf and nan - nan are nan).
    """
    avg_cpu_s, used_memory_kb, requested_memory_kb = float(f[5]), float(f[6]), float(f[9])
    if (avg_cpu_s - avg_cpu_s) + (used_memory_kb - used_memory_kb) + (
        requested_memory_kb - requested_memory_kb
    ) != 0.0:
        raise ValueError("non-finite float field")
    return SwfRecord(
        int(f[0]), int(f[1]), int(f[2]), int(f[3]), int(f[4]),
        avg_cpu_s, used_memory_kb,
        int(f[7]), int(f[8]),
        requested_memory_kb,
        int(f[10]), int(f[11]), int(f[12]), int(f[13]), int(f[14]), int(f[15]), int(f[16]),
        int(f[17]),
    )  # fmt: skip


def parse_fields(
    fields: list[str], *, path: str | None = None, line_no: int = 0
) -> SwfRecord:
    """Strictly convert the whitespace-split fields of one job line, or say what is wrong.

    This is the reference behaviour of the reader; the fast path in `SwfReader` only avoids the
    pattern checks on lines that cannot fail them.
    """
    if len(fields) != FIELD_COUNT:
        raise SwfFormatError(
            f"expected {FIELD_COUNT} fields, got {len(fields)}", path=path, line_no=line_no
        )
    values: list[int | float] = []
    for index, text in enumerate(fields):
        if index in _FLOAT_FIELD_INDEXES:
            values.append(_strict_float(text, path=path, line_no=line_no, field_no=index + 1))
        elif _INT_PATTERN.fullmatch(text):
            try:
                values.append(int(text))
            except ValueError:  # beyond Python's int_max_str_digits
                raise SwfFormatError(
                    f"integer of {len(text)} digits is too long",
                    path=path,
                    line_no=line_no,
                    field_no=index + 1,
                ) from None
        else:
            raise SwfFormatError(
                f"expected an integer, got {text!r}", path=path, line_no=line_no, field_no=index + 1
            )
    return SwfRecord(*values)  # type: ignore[arg-type]


def _strict_float(text: str, *, path: str | None, line_no: int, field_no: int) -> float:
    if _FLOAT_PATTERN.fullmatch(text):
        value = float(text)
        if math.isfinite(value):
            return value
        problem = f"expected a finite number, got {text!r}"
    else:
        problem = f"expected a number, got {text!r}"
    raise SwfFormatError(problem, path=path, line_no=line_no, field_no=field_no)


def iter_swf(
    path: str | os.PathLike[str],
    *,
    lenient: bool = False,
    on_bytes: BytesCallback | None = None,
) -> SwfReader:
    """Open `path` for streaming: `reader.header` now, then `for record in reader`.

    >>> with iter_swf("swf/KTH-SP2-sample.swf") as reader:   # doctest: +SKIP
    ...     machine_procs = reader.header.max_procs
    ...     for record in reader:
    ...         ...

    Strict mode raises `SwfFormatError` at the first bad line; lenient mode skips it and appends
    (line_no, reason) to `reader.skipped_lines`. An empty file raises in both modes: it is a
    truncated download or a wrong path far more often than a machine with no jobs (a file with
    only a header is valid and yields no records).
    """
    return SwfReader(path, lenient=lenient, on_bytes=on_bytes)


def read_swf(
    path: str | os.PathLike[str],
    *,
    lenient: bool = False,
    progress: BytesCallback | None = None,
) -> SwfLog:
    """Read a whole SWF file (plain or gzip) into memory; see `iter_swf` for the modes."""
    with iter_swf(path, lenient=lenient, on_bytes=progress) as reader:
        records = list(reader)
    return SwfLog(
        path=reader.path,
        header=reader.header,
        records=records,
        skipped_lines=reader.skipped_lines,
        body_comments=reader.body_comments,
        blank_lines=reader.blank_lines,
    )


def write_swf(
    destination: str | os.PathLike[str] | TextIO,
    header_lines: SwfHeader | Iterable[str],
    records: Iterable[SwfRecord],
) -> int:
    """Write an SWF file and return the number of records written.

    `destination` is a path (gzip-compressed when it ends in ".gz", with a zero timestamp so the
    output is reproducible) or an open text stream, left open. Header lines are written verbatim
    and must each start with ';'. Integer-valued floats are written without decimals, other floats
    with `repr`, so reading the file back gives equal records.
    """
    lines = header_lines.lines if isinstance(header_lines, SwfHeader) else tuple(header_lines)
    for line in lines:
        _check_header_line(line)
    if hasattr(destination, "write"):
        return _write_lines(destination, lines, records)  # type: ignore[arg-type]
    path = os.fspath(destination)  # type: ignore[arg-type]
    with _open_for_writing(path) as stream:
        return _write_lines(stream, lines, records)


def _check_header_line(line: str) -> None:
    if not line.lstrip().startswith(";") or "\n" in line or "\r" in line:
        raise ValueError(f"an SWF header line must be one line starting with ';', got {line!r}")


def _open_for_writing(path: str) -> TextIO:
    if not path.endswith(".gz"):
        return open(path, "w", encoding=_ENCODING, errors=_ENCODING_ERRORS, newline="\n")
    # Given a file name, GzipFile opens and closes the file itself; mtime=0 makes output stable.
    compressed = gzip.GzipFile(path, mode="wb", mtime=0)
    return io.TextIOWrapper(compressed, encoding=_ENCODING, errors=_ENCODING_ERRORS, newline="\n")


def _write_lines(stream: TextIO, header: tuple[str, ...], records: Iterable[SwfRecord]) -> int:
    for line in header:
        stream.write(line + "\n")
    count = 0
    for record in records:
        stream.write(format_record(record) + "\n")
        count += 1
    return count


def format_record(record: SwfRecord) -> str:
    """One job line in fixed-width-ish columns, as the archive writes them."""
    columns = []
    for index, (value, width) in enumerate(zip(_record_values(record), _COLUMN_WIDTHS)):
        if index in _FLOAT_FIELD_INDEXES:
            columns.append(f"{_format_float(value, SWF_FIELDS[index]):>{width}}")
        else:
            columns.append(f"{value:>{width}d}")
    return " ".join(columns)


def _format_float(value: float, name: str) -> str:
    """Shortest text that reads back as the same float; whole numbers without a decimal point."""
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite to be written in SWF, got {value!r}")
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(float(value))
