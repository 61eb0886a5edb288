"""The SWF reader and writer (hpcpredict/logs/swf.py): header keys, plain and gzip files, precise errors,
lenient mode, body comments, progress, streaming, and the write -> read round trip."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import random
import re
from dataclasses import astuple, fields as dataclass_fields
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import KTH_LOG, SAMPLE_LOG, make_record, shared_log
from hpcpredict.logs.swf import (
    FIELD_COUNT,
    SWF_FIELDS,
    SwfFormatError,
    SwfHeader,
    SwfLog,
    SwfReader,
    SwfRecord,
    format_record,
    iter_swf,
    parse_fields,
    parse_header,
    read_swf,
    write_swf,
)
from hpcpredict.logs.swf_table import read_swf_table

FLOAT_FIELDS = ("avg_cpu_s", "used_memory_kb", "requested_memory_kb")
FLOAT_FIELD_NOS = (6, 7, 10)  # 1-based SWF field numbers of the three float fields
INT_FIELD_NOS = tuple(n for n in range(1, 19) if n not in FLOAT_FIELD_NOS)


def _read_through_table(path, *, lenient=False, progress=None) -> SwfLog:
    """`read_swf` as `load_workload` now reads a log: through the columnar reader (its C fast
    path, or this careful reader for any unusual file), back as an SwfLog."""
    table = read_swf_table(path, lenient=lenient, progress=progress)
    return SwfLog(path=table.path, header=table.header, records=table.records(),
                  skipped_lines=table.skipped_lines, body_comments=table.body_comments,
                  blank_lines=table.blank_lines)


@pytest.fixture(autouse=True, scope="module", params=["careful reader", "columnar reader"])
def whole_file_reader(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test here that reads a whole file with `read_swf` runs twice, the second time
    through `read_swf_table`: the same records, and the same line-numbered errors on every
    malformed file these tests write (tests/test_swf_table.py checks the same on random files)."""
    if request.param == "careful reader":
        yield
        return
    careful = globals()["read_swf"]
    globals()["read_swf"] = _read_through_table
    try:
        yield
    finally:
        globals()["read_swf"] = careful


# KTH's first job line, verbatim.
KTH_LINE_1 = "    1        0 964980  97225   56     -1    -1   56 210000    -1  1   1   1  -1 -1 -1 -1 -1"
KTH_RECORD_1 = SwfRecord(1, 0, 964980, 97225, 56, -1.0, -1.0, 56, 210000, -1.0, 1, 1, 1, -1, -1, -1, -1, -1)

HEADER = (
    "; Version: 2.2",
    "; Computer: Test machine",
    "; MaxProcs: 128",
    "; MaxNodes: 64",
    "; UnixStartTime: 843480031",
    "; TimeZone: 3600",
    "; TimeZoneString: Europe/Stockholm",
    "; Note: first note",
    "; Note: second note",
    ";       a continuation line",
    ";",
)


def record(**overrides: int | float) -> SwfRecord:
    """A valid record with sensible defaults; override any field by name."""
    return make_record(**overrides)


def job_line(**overrides: object) -> str:
    """A job line whose fields are the default record's, with some replaced by raw text."""
    fields = [str(value) for value in astuple(record())]
    for name, text in overrides.items():
        fields[SWF_FIELDS.index(name)] = str(text)
    return " ".join(fields)


def write_text(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def write_gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wb") as stream:
        stream.write(text.encode("utf-8"))
    return path


def lines_to_text(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


# --------------------------------------------------------------------------------------------
# Data model


def test_swf_fields_are_the_18_fields_of_the_record_in_file_order():
    assert FIELD_COUNT == 18
    assert SWF_FIELDS == tuple(f.name for f in dataclass_fields(SwfRecord))
    assert SWF_FIELDS[3] == "run_s" and SWF_FIELDS[7] == "requested_procs"
    assert tuple(SWF_FIELDS[n - 1] for n in FLOAT_FIELD_NOS) == FLOAT_FIELDS


# --------------------------------------------------------------------------------------------
# Header


def test_parse_header_typed_keys_and_entries():
    header = parse_header(HEADER)
    assert header.lines == HEADER
    assert header.max_procs == 128
    assert header.max_nodes == 64
    assert header.unix_start_time == 843480031
    assert header.time_zone == 3600
    assert header.time_zone_string == "Europe/Stockholm"
    assert header.entries["Version"] == ("2.2",)
    assert header.entries["Computer"] == ("Test machine",)
    assert header.entries["MaxProcs"] == ("128",)
    # Repeated keys keep every value in file order; get() gives the first.
    assert header.entries["Note"] == ("first note", "second note")
    assert header.get("Note") == "first note"
    assert header.get("Computer") == "Test machine"
    assert header.get("Absent") is None
    # Continuation lines and bare ';' are in `lines` only.
    assert set(header.entries) == {
        "Version", "Computer", "MaxProcs", "MaxNodes", "UnixStartTime", "TimeZone",
        "TimeZoneString", "Note",
    }  # fmt: skip


def test_parse_header_absent_typed_keys_are_none():
    header = parse_header(["; Version: 2.2", "; free comment"])
    assert header.max_procs is None
    assert header.max_nodes is None
    assert header.unix_start_time is None
    assert header.time_zone is None
    assert header.time_zone_string is None
    assert header.entries == {"Version": ("2.2",)}
    assert parse_header([]) == SwfHeader()


def test_parse_header_negative_and_signed_values_and_spacing():
    header = parse_header([";TimeZone:   -18000  ", ";  MaxProcs : +16", "; UnixStartTime:\t0"])
    assert header.time_zone == -18000
    assert header.max_procs == 16
    assert header.unix_start_time == 0
    # The value is stripped of surrounding whitespace; inner spaces stay.
    assert parse_header(["; Computer:   IBM  SP2   "]).get("Computer") == "IBM  SP2"


def test_parse_header_keys_must_start_with_a_capital_letter():
    header = parse_header(["; maxprocs: 5", "; 1st: x"])
    assert header.max_procs is None
    assert header.entries == {}


def test_parse_header_repeated_typed_key_with_same_value_is_fine():
    header = parse_header(["; MaxProcs: 100", "; Note: x", "; MaxProcs: 100"])
    assert header.max_procs == 100
    assert header.entries["MaxProcs"] == ("100", "100")


@pytest.mark.parametrize(
    ("key", "first", "second"),
    [
        ("MaxProcs", "100", "128"),
        ("MaxNodes", "1", "2"),
        ("UnixStartTime", "0", "1"),
        ("TimeZone", "3600", "-3600"),
        ("TimeZoneString", "Europe/Paris", "Europe/Stockholm"),
    ],
)
def test_parse_header_repeated_typed_key_with_different_value_raises(key, first, second):
    lines = ["; Version: 2", f"; {key}: {first}", "; Note: n", f"; {key}: {second}"]
    with pytest.raises(SwfFormatError) as info:
        parse_header(lines, path="h.swf", line_nos=[3, 4, 5, 9])
    error = info.value
    assert error.path == "h.swf"
    assert error.line_no == 9  # the second occurrence, numbered by line_nos
    assert error.field_no is None
    assert key in error.message and "repeated" in error.message
    assert str(error).startswith("h.swf:9: ")


@pytest.mark.parametrize("key", ["MaxProcs", "MaxNodes", "UnixStartTime", "TimeZone"])
@pytest.mark.parametrize("value", ["abc", "1.5", "1e3", "1_000", "nan", "", "١٢"])
def test_parse_header_non_integer_typed_value_raises(key, value):
    with pytest.raises(SwfFormatError) as info:
        parse_header(["; Version: 1", f"; {key}: {value}"], path="x.swf")
    assert info.value.line_no == 2  # default numbering: 1-based position
    assert info.value.path == "x.swf"
    assert key in info.value.message
    assert str(info.value).startswith("x.swf:2: ")


def test_read_header_from_file_and_header_line_numbers(tmp_path):
    text = lines_to_text(
        "; Version: 2.2", "", "; MaxProcs: 100", "; MaxProcs: 99", KTH_LINE_1
    )
    path = write_text(tmp_path / "h.swf", text)
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    # The blank line counts: the repeated key is on line 4 of the file.
    assert info.value.line_no == 4
    assert str(info.value).startswith(f"{path}:4: ")
    # Header errors raise even in lenient mode: MaxProcs decides what cleaning drops.
    with pytest.raises(SwfFormatError):
        read_swf(path, lenient=True)


# --------------------------------------------------------------------------------------------
# Reading plain and gzip files


def _sample_text() -> str:
    return lines_to_text(
        *HEADER,
        KTH_LINE_1,
        "2 10 5 60 8 186.92 1024.5 16 120 2048 0 2 2 1 1 1 -1 -1",
        "\t3\t20\t0\t30\t1\t-1\t-1\t1\t60\t-1\t5\t2\t2\t-1\t-1\t-1\t1\t5",
    )


EXPECTED_SAMPLE_RECORDS = [
    KTH_RECORD_1,
    SwfRecord(2, 10, 5, 60, 8, 186.92, 1024.5, 16, 120, 2048.0, 0, 2, 2, 1, 1, 1, -1, -1),
    SwfRecord(3, 20, 0, 30, 1, -1.0, -1.0, 1, 60, -1.0, 5, 2, 2, -1, -1, -1, 1, 5),
]


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_read_plain_and_gzip(tmp_path, compress):
    path = tmp_path / ("log.swf.gz" if compress else "log.swf")
    (write_gz if compress else write_text)(path, _sample_text())
    log = read_swf(path)
    assert isinstance(log, SwfLog)
    assert log.path == str(path)
    assert log.records == EXPECTED_SAMPLE_RECORDS
    assert log.header.lines == HEADER
    assert log.header.max_procs == 128
    assert log.header.time_zone_string == "Europe/Stockholm"
    assert log.skipped_lines == [] and log.body_comments == [] and log.blank_lines == []
    for rec in log.records:
        for name in SWF_FIELDS:
            expected_type = float if name in FLOAT_FIELDS else int
            assert type(getattr(rec, name)) is expected_type, name


def test_gzip_is_detected_by_content_not_name(tmp_path):
    mislabelled = write_gz(tmp_path / "log.swf", _sample_text())
    plain_named_gz = write_text(tmp_path / "plain.swf.gz", _sample_text())
    assert read_swf(mislabelled).records == EXPECTED_SAMPLE_RECORDS
    assert read_swf(plain_named_gz).records == EXPECTED_SAMPLE_RECORDS


def test_crlf_line_endings_and_missing_final_newline(tmp_path):
    text = "\r\n".join([*HEADER, KTH_LINE_1, job_line(job_id=2)])  # no trailing newline
    log = read_swf(write_text(tmp_path / "crlf.swf", text))
    assert log.header.lines == HEADER  # no '\r' left in header lines
    assert log.records == [KTH_RECORD_1, record(job_id=2)]


def test_header_only_file_is_valid_and_has_no_records(tmp_path):
    log = read_swf(write_text(tmp_path / "h.swf", lines_to_text(*HEADER)))
    assert log.records == []
    assert log.header.max_procs == 128


def test_file_without_header(tmp_path):
    log = read_swf(write_text(tmp_path / "n.swf", lines_to_text(KTH_LINE_1)))
    assert log.header == SwfHeader()
    assert log.records == [KTH_RECORD_1]


@pytest.mark.parametrize("text", ["", "\n", "\n  \n\t\n"], ids=["empty", "newline", "blanks"])
@pytest.mark.parametrize("lenient", [False, True])
def test_empty_file_raises_in_both_modes(tmp_path, text, lenient):
    path = write_text(tmp_path / "e.swf", text)
    with pytest.raises(SwfFormatError) as info:
        read_swf(path, lenient=lenient)
    assert "empty" in info.value.message
    assert info.value.line_no >= 1
    assert info.value.path == str(path)


def test_empty_gzip_file_raises(tmp_path):
    path = write_gz(tmp_path / "e.swf.gz", "")
    with pytest.raises(SwfFormatError, match="empty"):
        read_swf(path)


def test_utf8_and_stray_bytes_in_header_are_kept(tmp_path):
    path = tmp_path / "bytes.swf"
    path.write_bytes(
        b"; Installation: Universit\xc3\xa9\n; Note: stray \xff\xfe bytes\n"
        + KTH_LINE_1.encode()
        + b"\n"
    )
    log = read_swf(path)
    assert log.header.get("Installation") == "Université"
    assert log.records == [KTH_RECORD_1]
    # The stray bytes survive a write back, byte for byte.
    out = tmp_path / "out.swf"
    write_swf(out, log.header, log.records)
    assert out.read_bytes().splitlines()[:2] == path.read_bytes().splitlines()[:2]


# --------------------------------------------------------------------------------------------
# Malformed job lines: the error names file, line and field


def _strict_error(tmp_path: Path, bad_line: str, *, compress: bool = False) -> SwfFormatError:
    """Read a file whose line 4 is `bad_line` (lines 1-2 header, 3 and 5 good jobs)."""
    text = lines_to_text("; Version: 2.2", "; MaxProcs: 100", KTH_LINE_1, bad_line, job_line())
    name = "bad.swf.gz" if compress else "bad.swf"
    path = (write_gz if compress else write_text)(tmp_path / name, text)
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    error = info.value
    assert error.path == str(path)
    assert error.line_no == 4
    assert f"{path}:4:" in str(error)
    assert str(error).startswith(f"{path}:4: ")
    return error


@pytest.mark.parametrize("count", [1, 17, 19, 36])
def test_wrong_field_count(tmp_path, count):
    bad = " ".join(["1"] * count)
    error = _strict_error(tmp_path, bad)
    assert error.field_no is None
    assert error.message == f"expected 18 fields, got {count}"
    assert error.reason == error.message


@pytest.mark.parametrize("field_no", INT_FIELD_NOS)
@pytest.mark.parametrize("text", ["1.5", "1e3", "1_000", "abc", "0x10", "nan", "inf", "--1", "٣"])
def test_non_integer_in_integer_field(tmp_path, field_no, text):
    name = SWF_FIELDS[field_no - 1]
    error = _strict_error(tmp_path, job_line(**{name: text}))
    assert error.field_no == field_no
    assert repr(text) in error.message
    assert "integer" in error.message
    assert error.reason == f"field {field_no} ({name}): {error.message}"
    assert f"field {field_no} ({name})" in str(error)


@pytest.mark.parametrize("field_no", FLOAT_FIELD_NOS)
@pytest.mark.parametrize(
    "text", ["nan", "NaN", "inf", "-inf", "Infinity", "1_000", "1e400", "abc", "1.2.3", "١٫٥", "0x1p3"]
)
def test_bad_float_field(tmp_path, field_no, text):
    name = SWF_FIELDS[field_no - 1]
    error = _strict_error(tmp_path, job_line(**{name: text}))
    assert error.field_no == field_no
    assert repr(text) in error.message
    assert f"field {field_no} ({name})" in str(error)


def test_first_bad_field_is_the_one_named(tmp_path):
    error = _strict_error(tmp_path, job_line(run_s="x", status="y", avg_cpu_s="nan"))
    assert error.field_no == 4  # run_s, before avg_cpu_s (6) and status (11)


def test_error_on_the_first_job_line_right_after_the_header(tmp_path):
    path = write_text(tmp_path / "f.swf", lines_to_text(*HEADER, job_line(wait_s="1.0")))
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    assert info.value.line_no == len(HEADER) + 1
    assert info.value.field_no == 3


def test_error_in_gzip_file_names_the_line(tmp_path):
    error = _strict_error(tmp_path, job_line(requested_procs="4.0"), compress=True)
    assert error.field_no == 8


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("186.92", 186.92),  # SDSC-BLUE writes CPU time and memory with decimals
        ("-1", -1.0),
        ("0", 0.0),
        ("1.", 1.0),
        (".5", 0.5),
        ("+2.5", 2.5),
        ("-0.25", -0.25),
        ("1e3", 1000.0),
        ("1.5E-2", 0.015),
        ("007", 7.0),
    ],
)
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_float_fields_accept_decimals(tmp_path, text, value, name):
    path = write_text(tmp_path / "f.swf", lines_to_text(job_line(**{name: text})))
    (rec,) = read_swf(path).records
    assert getattr(rec, name) == value
    assert type(getattr(rec, name)) is float
    assert parse_fields(job_line(**{name: text}).split()) == rec


def test_integer_fields_accept_signs_and_leading_zeros(tmp_path):
    line = job_line(job_id="+12", submit_s="007", wait_s="-0", think_time_s="-1")
    (rec,) = read_swf(write_text(tmp_path / "i.swf", lines_to_text(line))).records
    assert (rec.job_id, rec.submit_s, rec.wait_s, rec.think_time_s) == (12, 7, 0, -1)


def test_parse_fields_directly():
    assert parse_fields(KTH_LINE_1.split()) == KTH_RECORD_1
    with pytest.raises(SwfFormatError) as info:
        parse_fields(["1"] * 17, path="p.swf", line_no=12)
    assert str(info.value) == "p.swf:12: expected 18 fields, got 17"
    with pytest.raises(SwfFormatError) as info:
        parse_fields(job_line(user_id="u1").split())
    assert str(info.value) == "<swf>:0: field 12 (user_id): expected an integer, got 'u1'"
    assert info.value.path is None


def test_format_error_is_a_value_error_and_pickles():
    error = SwfFormatError("expected 18 fields, got 3", path="a.swf", line_no=7, field_no=None)
    assert isinstance(error, ValueError)
    assert str(error) == "a.swf:7: expected 18 fields, got 3"
    field_error = SwfFormatError("bad", path=None, line_no=2, field_no=4)
    assert str(field_error) == "<swf>:2: field 4 (run_s): bad"
    for original in (error, field_error):
        copy = pickle.loads(pickle.dumps(original))
        assert type(copy) is SwfFormatError
        assert (copy.message, copy.path, copy.line_no, copy.field_no) == (
            original.message, original.path, original.line_no, original.field_no,
        )  # fmt: skip
        assert str(copy) == str(original)


def _gzip_bytes(n_lines: int = 3000, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    lines = [
        job_line(job_id=i, submit_s=rng.randrange(10**7), run_s=rng.randrange(1, 10**5))
        for i in range(1, n_lines + 1)
    ]
    return gzip.compress(lines_to_text(*HEADER, *lines).encode())


@pytest.mark.parametrize("keep", [0.5, 0.9, 12, 40], ids=["half", "most", "in-header", "early"])
@pytest.mark.parametrize("lenient", [False, True])
def test_truncated_gzip_raises_format_error(tmp_path, keep, lenient):
    data = _gzip_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep
    path = tmp_path / "trunc.swf.gz"
    path.write_bytes(data[:cut])
    with pytest.raises(SwfFormatError) as info:
        read_swf(path, lenient=lenient)  # not a bad line that lenient mode could skip
    error = info.value
    assert error.path == str(path)
    assert error.line_no >= 1
    assert "gzip" in error.message
    assert str(error).startswith(f"{path}:{error.line_no}: ")


def test_gzip_with_bad_crc_raises_format_error(tmp_path):
    data = bytearray(_gzip_bytes())
    data[-6] ^= 0xFF  # inside the CRC32 of the trailer: the content itself is intact
    path = tmp_path / "crc.swf.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(SwfFormatError, match="corrupt or truncated gzip"):
        read_swf(path)


def test_gzip_with_garbage_after_magic_raises_format_error(tmp_path):
    path = tmp_path / "garbage.swf.gz"
    path.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    assert info.value.line_no == 1
    assert "gzip" in info.value.message


def test_gzip_corrupted_in_the_middle_raises_format_error(tmp_path):
    data = bytearray(_gzip_bytes())
    for offset in range(len(data) // 2, len(data) // 2 + 16):
        data[offset] ^= 0x5A
    path = tmp_path / "corrupt.swf.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize("lenient", [False, True])
def test_huge_integer_field_gives_format_error(tmp_path, lenient):
    path = write_text(
        tmp_path / "huge.swf", lines_to_text(KTH_LINE_1, job_line(submit_s="9" * 5000), KTH_LINE_1)
    )
    if lenient:
        log = read_swf(path, lenient=True)
        assert log.records == [KTH_RECORD_1, KTH_RECORD_1]
        assert [line_no for line_no, _ in log.skipped_lines] == [2]
    else:
        with pytest.raises(SwfFormatError) as info:
            read_swf(path)
        assert (info.value.line_no, info.value.field_no) == (2, 2)


def test_huge_header_integer_gives_format_error():
    with pytest.raises(SwfFormatError):
        parse_header(["; MaxProcs: " + "1" * 5000])


# --------------------------------------------------------------------------------------------
# Lenient mode


def test_lenient_skips_bad_lines_and_records_them(tmp_path):
    lines = [
        *HEADER,  # lines 1-11
        KTH_LINE_1,  # 12 good
        "1 2 3",  # 13 wrong count
        job_line(job_id=2),  # 14 good
        job_line(run_s="1.5"),  # 15 non-integer in field 4
        job_line(avg_cpu_s="nan"),  # 16 nan in field 6
        job_line(requested_memory_kb="inf"),  # 17 inf in field 10
        job_line(submit_s="1_000"),  # 18 underscore in field 2
        job_line(job_id=3, used_memory_kb="186.92"),  # 19 good, decimal float
        " ".join(["1"] * 19),  # 20 too many fields
    ]
    path = write_text(tmp_path / "l.swf", lines_to_text(*lines))
    log = read_swf(path, lenient=True)
    assert log.records == [KTH_RECORD_1, record(job_id=2), record(job_id=3, used_memory_kb=186.92)]
    assert log.skipped_lines == [
        (13, "expected 18 fields, got 3"),
        (15, "field 4 (run_s): expected an integer, got '1.5'"),
        (16, "field 6 (avg_cpu_s): expected a number, got 'nan'"),
        (17, "field 10 (requested_memory_kb): expected a number, got 'inf'"),
        (18, "field 2 (submit_s): expected an integer, got '1_000'"),
        (20, "expected 18 fields, got 19"),
    ]
    assert log.header.max_procs == 128
    # Strict mode stops at the first bad line, line 13.
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    assert info.value.line_no == 13


def test_strict_mode_has_no_skipped_lines(tmp_path):
    log = read_swf(write_text(tmp_path / "s.swf", _sample_text()))
    assert log.skipped_lines == []


def test_lenient_mode_in_gzip_file(tmp_path):
    text = lines_to_text(KTH_LINE_1, "garbage", job_line(job_id=9))
    log = read_swf(write_gz(tmp_path / "l.swf.gz", text), lenient=True)
    assert log.records == [KTH_RECORD_1, record(job_id=9)]
    assert log.skipped_lines == [(2, "expected 18 fields, got 1")]


# --------------------------------------------------------------------------------------------
# Comments and blank lines in the body


def test_body_comments_and_blank_lines_are_kept_with_line_numbers(tmp_path):
    lines = [
        "; Version: 2.2",  # 1
        "",  # 2 blank inside the header
        "; MaxProcs: 100",  # 3
        KTH_LINE_1,  # 4
        "; a comment in the body",  # 5
        "",  # 6
        job_line(job_id=2),  # 7
        "   ;indented comment  ",  # 8
        "  \t ",  # 9 whitespace only
        "; MaxProcs: 5",  # 10 a header-looking comment in the body is not header
        job_line(job_id=3),  # 11
        "",  # 12
    ]
    log = read_swf(write_text(tmp_path / "c.swf", lines_to_text(*lines)))
    assert log.records == [KTH_RECORD_1, record(job_id=2), record(job_id=3)]
    assert log.body_comments == [
        (5, "; a comment in the body"),
        (8, "   ;indented comment  "),
        (10, "; MaxProcs: 5"),
    ]
    assert log.blank_lines == [2, 6, 9, 12]
    assert log.header.lines == ("; Version: 2.2", "; MaxProcs: 100")
    assert log.header.max_procs == 100  # the body's "MaxProcs: 5" is not read as header
    assert log.skipped_lines == []


def test_leading_blank_lines_before_header(tmp_path):
    log = read_swf(write_text(tmp_path / "b.swf", lines_to_text("", "", "; MaxProcs: 3", KTH_LINE_1)))
    assert log.blank_lines == [1, 2]
    assert log.header.max_procs == 3
    assert log.records == [KTH_RECORD_1]


# --------------------------------------------------------------------------------------------
# Progress


def _many_lines_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = [
        job_line(
            job_id=i,
            submit_s=rng.randrange(10**8),
            wait_s=rng.randrange(10**6),
            run_s=rng.randrange(1, 10**6),
            user_id=rng.randrange(1000),
            used_memory_kb=rng.randrange(10**7),
        )
        for i in range(1, n + 1)
    ]
    return lines_to_text(*HEADER, *lines)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_progress_is_called_with_increasing_byte_counts(tmp_path, compress):
    n = 20_000  # more than two progress intervals of 8192 lines
    path = tmp_path / ("p.swf.gz" if compress else "p.swf")
    (write_gz if compress else write_text)(path, _many_lines_text(n))
    calls: list[int] = []
    log = read_swf(path, progress=calls.append)
    assert len(log.records) == n
    assert len(calls) >= 2
    assert all(isinstance(c, int) and c > 0 for c in calls)
    assert calls == sorted(calls)  # never decreasing
    assert calls[-1] == os.path.getsize(path)  # compressed size on disk for .gz
    if not compress:
        assert len(calls) >= n // 8192  # one call per 8192 lines, plus the final one
        assert all(a < b for a, b in zip(calls[:-1], calls[1:-1]))
    else:
        assert calls[0] < calls[-1]


def test_progress_is_called_at_the_end_of_a_small_file(tmp_path):
    path = write_text(tmp_path / "s.swf", _sample_text())
    calls: list[int] = []
    read_swf(path, progress=calls.append)
    assert calls == [os.path.getsize(path)]


# --------------------------------------------------------------------------------------------
# Streaming


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_iter_swf_yields_what_read_swf_returns(tmp_path, compress):
    lines = [*HEADER, KTH_LINE_1, "; body comment", "", "bad line", job_line(job_id=5)]
    path = tmp_path / ("s.swf.gz" if compress else "s.swf")
    (write_gz if compress else write_text)(path, lines_to_text(*lines))
    log = read_swf(path, lenient=True)
    with iter_swf(path, lenient=True) as reader:
        assert isinstance(reader, SwfReader)
        # The header is there before the first record is read.
        assert reader.header == log.header
        assert reader.header.max_procs == 128
        streamed = list(reader)
    assert streamed == log.records == [KTH_RECORD_1, record(job_id=5)]
    assert reader.skipped_lines == log.skipped_lines == [(15, "expected 18 fields, got 2")]
    assert reader.body_comments == log.body_comments == [(13, "; body comment")]
    assert reader.blank_lines == log.blank_lines == [14]


def test_iter_swf_is_lazy_and_closes(tmp_path):
    path = write_text(tmp_path / "s.swf", _many_lines_text(1000))
    reader = iter_swf(path)
    first = next(reader)
    assert first.job_id == 1
    assert not reader._raw.closed
    rest = list(reader)
    assert len(rest) == 999
    assert reader._raw.closed  # exhausting the reader closes the file
    assert list(reader) == []  # it can be iterated once
    reader.close()  # closing again is safe

    with iter_swf(path) as early:
        next(early)
    assert early._raw.closed  # the context manager closes an unfinished reader


def test_iter_swf_strict_raises_at_the_bad_line_after_yielding_good_ones(tmp_path):
    path = write_text(tmp_path / "s.swf", lines_to_text(KTH_LINE_1, job_line(job_id=2), "x y"))
    with iter_swf(path) as reader:
        assert next(reader) == KTH_RECORD_1
        assert next(reader) == record(job_id=2)
        with pytest.raises(SwfFormatError) as info:
            next(reader)
    assert info.value.line_no == 3


def test_iter_swf_header_error_raises_on_opening(tmp_path):
    path = write_text(tmp_path / "h.swf", lines_to_text("; MaxProcs: many", KTH_LINE_1))
    with pytest.raises(SwfFormatError) as info:
        iter_swf(path)
    assert info.value.line_no == 1


def test_missing_file_raises_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_swf(tmp_path / "nope.swf")


# --------------------------------------------------------------------------------------------
# Writing


def test_format_record_columns():
    line = format_record(KTH_RECORD_1)
    assert line.split() == KTH_LINE_1.split()
    assert parse_fields(line.split()) == KTH_RECORD_1
    decimal = format_record(record(avg_cpu_s=186.92, used_memory_kb=1e20, requested_memory_kb=2.0))
    assert decimal.split()[5] == "186.92"
    assert decimal.split()[6] == "1e+20"
    assert decimal.split()[9] == "2"  # whole floats without a decimal point
    wide = format_record(record(job_id=10**12))
    assert wide.split()[0] == str(10**12)


def test_format_record_rejects_non_finite_floats():
    with pytest.raises(ValueError, match="avg_cpu_s"):
        format_record(record(avg_cpu_s=float("nan")))
    with pytest.raises(ValueError, match="requested_memory_kb"):
        format_record(record(requested_memory_kb=float("inf")))


def test_write_swf_to_stream_and_path(tmp_path):
    records = [record(job_id=i, submit_s=10 * i) for i in range(1, 4)]
    stream = io.StringIO()
    assert write_swf(stream, HEADER, records) == 3
    assert not stream.closed  # a stream is left open
    text = stream.getvalue()
    assert text.splitlines()[: len(HEADER)] == list(HEADER)
    assert text.endswith("\n")
    assert len(text.splitlines()) == len(HEADER) + 3
    path = tmp_path / "w.swf"
    assert write_swf(path, parse_header(HEADER), iter(records)) == 3
    assert path.read_text() == text


def test_write_swf_gzip_is_reproducible(tmp_path):
    records = [record(job_id=i) for i in range(50)]
    # Same file name in two directories: the gzip header stores the name, and mtime is 0.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "w.swf.gz", tmp_path / "b" / "w.swf.gz"
    write_swf(a, HEADER, records)
    write_swf(b, HEADER, records)
    assert a.read_bytes()[:2] == b"\x1f\x8b"
    assert a.read_bytes() == b.read_bytes()
    assert read_swf(a).records == records


@pytest.mark.parametrize("bad", ["Version: 2", "", "; two\n; lines", "; carriage\r", "x ;"])
def test_write_swf_rejects_bad_header_lines(tmp_path, bad):
    with pytest.raises(ValueError):
        write_swf(tmp_path / "x.swf", ["; ok", bad], [record()])
    assert not (tmp_path / "x.swf").exists()  # checked before anything is written


def test_sample_round_trips_byte_for_byte_in_content(tmp_path):
    log = read_swf(SAMPLE_LOG)
    out = tmp_path / "copy.swf.gz"
    assert write_swf(out, log.header, log.records) == 5000
    again = read_swf(out)
    assert again.header == log.header
    assert again.records == log.records


# --------------------------------------------------------------------------------------------
# Property-based tests

INT_VALUES = st.one_of(
    st.just(-1),
    st.integers(min_value=0, max_value=100),
    st.integers(min_value=-1, max_value=2**31 - 1),
    st.integers(min_value=-(2**40), max_value=2**40),
)
FLOAT_VALUES = st.one_of(
    st.just(-1.0),
    st.integers(min_value=-1, max_value=10**9).map(float),
    st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(min_value=0, max_value=10**6, places=2).map(float),
)
RECORDS = st.builds(
    SwfRecord,
    **{name: (FLOAT_VALUES if name in FLOAT_FIELDS else INT_VALUES) for name in SWF_FIELDS},
)
# Free comment text: no line breaks (the reader splits on \r and \n) and no ':' (not a key).
COMMENT_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n:"),
    max_size=30,
)
HEADER_VALUE = st.text(
    alphabet=st.characters(
        whitelist_categories=("L", "N", "P", "Zs"), blacklist_characters="\r\n", max_codepoint=0x2FF
    ),
    max_size=20,
).map(str.strip)


@st.composite
def headers(draw):
    """Header lines and what parsing them must give: (lines, entries, typed attributes)."""
    lines: list[str] = []
    entries: dict[str, list[str]] = {}
    typed: dict[str, object] = {}
    typed_values = {
        "MaxProcs": ("max_procs", draw(st.integers(1, 10**6))),
        "MaxNodes": ("max_nodes", draw(st.integers(1, 10**6))),
        "UnixStartTime": ("unix_start_time", draw(st.integers(0, 2**34))),
        "TimeZone": ("time_zone", draw(st.integers(-50400, 50400))),
        "TimeZoneString": ("time_zone_string", draw(st.sampled_from(["Europe/Paris", "UTC"]))),
    }
    kinds = draw(
        st.lists(
            st.sampled_from(["typed", "note", "free", "bare", "other"]), min_size=0, max_size=12
        )
    )
    for kind in kinds:
        if kind == "typed":
            key = draw(st.sampled_from(sorted(typed_values)))
            attribute, value = typed_values[key]
            lines.append(f"; {key}: {value}")
            entries.setdefault(key, []).append(str(value))
            typed[attribute] = value
        elif kind == "note":
            value = draw(HEADER_VALUE)
            line = f"; Note: {value}" if value else "; Note:"
            lines.append(line)
            entries.setdefault("Note", []).append(value)
        elif kind == "other":
            key = draw(st.sampled_from(["Version", "Computer", "Queue", "Partition", "X_1"]))
            value = draw(HEADER_VALUE)
            lines.append(f";{key}: {value}" if value else f";{key}:")
            entries.setdefault(key, []).append(value)
        elif kind == "bare":
            lines.append(draw(st.sampled_from([";", " ;", "\t;  "])))
        else:
            lines.append(";" + draw(COMMENT_TEXT))
    return tuple(lines), {k: tuple(v) for k, v in entries.items()}, typed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=headers(), records=st.lists(RECORDS, max_size=20), compress=st.booleans())
def test_write_read_round_trip(tmp_path, header, records, compress):
    lines, entries, typed = header
    path = tmp_path / ("rt.swf.gz" if compress else "rt.swf")
    if not lines and not records:
        write_swf(path, lines, records)
        with pytest.raises(SwfFormatError, match="empty"):
            read_swf(path)
        return
    assert write_swf(path, lines, records) == len(records)
    log = read_swf(path)
    assert log.records == records
    for got, expected in zip(log.records, records):
        assert astuple(got) == astuple(expected)
        for name in SWF_FIELDS:
            assert type(getattr(got, name)) is (float if name in FLOAT_FIELDS else int)
    assert log.header.lines == lines
    assert log.header.entries == entries
    expected_header = SwfHeader(lines=lines, entries=entries, **typed)
    assert log.header == expected_header
    assert log.skipped_lines == [] and log.body_comments == [] and log.blank_lines == []
    # Writing the parsed log again gives the same file.
    (tmp_path / "again").mkdir(exist_ok=True)
    again = tmp_path / "again" / path.name  # same name: a gzip header stores it
    write_swf(again, log.header, log.records)
    assert again.read_bytes() == path.read_bytes()


ARBITRARY_LINE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80)
NUMBERISH = st.lists(
    st.sampled_from(
        [
            "1", "-1", "+3", "0", "00", "1.5", "186.92", ".5", "1.", "1e3", "1E-2", "nan", "inf",
            "-inf", "1_000", "٣", "0x1", "1e400", "--1", "+", "-", ".", "e5", "1e", ";", "a",
        ]
    ),
    min_size=15,
    max_size=20,
).map(" ".join)  # fmt: skip
# Exactly 18 fields, mostly valid: the lines where the fast and slow paths could disagree.
EIGHTEEN_NUMBERISH = st.lists(
    st.one_of(
        st.integers(-1, 10**6).map(str),
        st.sampled_from(["186.92", "+1", "-0", "1.", ".5", "1e3", "nan", "inf", "1_0", "٣", "1e400"]),
    ),
    min_size=18,
    max_size=18,
).map("  ".join)
LINE = st.one_of(ARBITRARY_LINE, NUMBERISH, EIGHTEEN_NUMBERISH, st.just(KTH_LINE_1), st.just(""))


def _write_raw(path: Path, data: str | bytes) -> None:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, max_size=10))
def test_strict_parse_raises_only_format_errors_on_arbitrary_text(tmp_path, lines):
    path = tmp_path / "arb.swf"
    _write_raw(path, "\n".join(lines))
    try:
        log = read_swf(path)
    except SwfFormatError as error:
        assert error.path == str(path)
        assert error.line_no >= 1
        assert str(error).startswith(f"{path}:{error.line_no}: ")
    else:
        assert log.skipped_lines == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_strict_parse_raises_only_format_errors_on_arbitrary_bytes(tmp_path, data):
    for prefix in (b"", b"\x1f\x8b"):  # also as (broken) gzip
        path = tmp_path / "arb.bin"
        _write_raw(path, prefix + data)
        try:
            read_swf(path)
        except SwfFormatError as error:
            assert error.path == str(path) and error.line_no >= 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.lists(LINE, max_size=12))
def test_lenient_never_raises_on_body_lines(tmp_path, body):
    path = tmp_path / "len.swf"
    _write_raw(path, lines_to_text("; MaxProcs: 100", KTH_LINE_1, *body, KTH_LINE_1))
    log = read_swf(path, lenient=True)
    assert log.records[0] == KTH_RECORD_1 and log.records[-1] == KTH_RECORD_1
    assert log.header.max_procs == 100
    physical_lines = len(path.read_text(encoding="utf-8").splitlines())
    # Every line is accounted for: header, record, skipped, comment or blank.
    # (str.splitlines splits on more characters than the reader does, so compare with <=.)
    accounted = 1 + len(log.records) + len(log.skipped_lines) + len(log.body_comments) + len(
        log.blank_lines
    )
    assert accounted <= physical_lines
    skipped_numbers = [line_no for line_no, _ in log.skipped_lines]
    assert skipped_numbers == sorted(set(skipped_numbers))
    assert all(3 <= n for n in skipped_numbers)
    for _, reason in log.skipped_lines:
        assert reason.startswith(("expected 18 fields", "field "))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.one_of(NUMBERISH, EIGHTEEN_NUMBERISH, RECORDS.map(format_record)).filter(
        lambda line: not line.lstrip().startswith(";")  # a comment line, not a job line
    )
)
def test_reader_fast_path_agrees_with_parse_fields(tmp_path, line):
    """Whatever the reader does with a line, parse_fields (the specification) does the same."""
    path = tmp_path / "one.swf"
    _write_raw(path, line + "\n")
    try:
        expected = parse_fields(line.split(), path=str(path), line_no=1)
    except SwfFormatError as error:
        with pytest.raises(SwfFormatError) as info:
            read_swf(path)
        assert str(info.value) == str(error)
        log = read_swf(path, lenient=True)
        assert log.records == [] and log.skipped_lines == [(1, error.reason)]
    else:
        assert read_swf(path).records == [expected]


@settings(max_examples=200, deadline=None)
@given(fields=st.lists(st.text(max_size=12), max_size=20))
def test_parse_fields_raises_only_format_errors(fields):
    try:
        rec = parse_fields(fields, path="f", line_no=3)
    except SwfFormatError as error:
        assert error.line_no == 3
        assert error.field_no is None or 1 <= error.field_no <= 18
    else:
        assert len(fields) == 18
        assert parse_fields(format_record(rec).split()) == rec


# --------------------------------------------------------------------------------------------
# The shipped sample and the real log


def test_shipped_kth_sample(sample_log):
    assert sample_log == SAMPLE_LOG
    log = read_swf(sample_log)
    assert len(log.records) == 5000
    header = log.header
    assert header.max_procs == 100
    assert header.max_nodes == 100
    assert header.unix_start_time == 843480031
    assert header.time_zone == 3600
    assert header.time_zone_string == "Europe/Stockholm"
    assert header.get("MaxJobs") == "5000"
    assert header.get("Computer") == "IBM SP2"
    assert len(header.entries["Note"]) == 2
    assert header.entries["Information"] == ("http://www.pdc.kth.se/",)  # 2nd URL: continuation
    assert log.records[0] == KTH_RECORD_1
    assert [r.job_id for r in log.records] == list(range(1, 5001))
    assert log.skipped_lines == [] and log.body_comments == [] and log.blank_lines == []
    # Streaming gives the same.
    with iter_swf(sample_log) as reader:
        assert reader.header == header
        assert list(reader) == log.records


@pytest.mark.reallog
def test_real_kth_log():
    path = shared_log(KTH_LOG)
    calls: list[int] = []
    log = read_swf(path, progress=calls.append)
    assert len(log.records) == 28_489  # the archive's README: 28,489 jobs
    assert log.skipped_lines == [] and log.body_comments == [] and log.blank_lines == []
    assert log.header.max_procs == 100
    assert log.header.unix_start_time == 843480031
    assert log.header.time_zone_string == "Europe/Stockholm"
    assert log.records[0] == KTH_RECORD_1
    # Job ids 1..28490 in order, with 27313 absent from the archive's log (MaxJobs says 28490).
    assert [r.job_id for r in log.records] == [i for i in range(1, 28_491) if i != 27_313]
    assert calls == sorted(calls) and calls[-1] == os.path.getsize(path)
    # The sample is the first 5000 job lines of this log, unmodified.
    assert read_swf(SAMPLE_LOG).records == log.records[:5000]
    # Lenient mode finds nothing to skip either.
    assert read_swf(path, lenient=True).records == log.records


def test_error_message_format_matches_the_documented_example(tmp_path):
    path = write_text(tmp_path / "KTH.swf", lines_to_text(KTH_LINE_1, job_line(run_s="1.5e3")))
    with pytest.raises(SwfFormatError) as info:
        read_swf(path)
    assert str(info.value) == f"{path}:2: field 4 (run_s): expected an integer, got '1.5e3'"
    assert re.fullmatch(r".+:\d+: .+", str(info.value))
