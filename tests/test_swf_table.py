"""The columnar SWF reader (hpcpredict/logs/swf_table.py): its C fast path agrees with the careful
reader (hpcpredict/logs/swf.py) on every file, valid or not.

The property: whatever the bytes, `read_swf_table` gives exactly what `read_swf` gives (the same
records, header, skipped lines, body comments and blank lines, or the same line-numbered error),
in strict and lenient mode; and whenever the fast path accepts a file, the careful reader accepts
it too, with the same values. Files are drawn from valid job lines mixed with the malformations
the careful reader diagnoses (and a few it accepts that a C parser might read otherwise: ``3.``
in an integer field, ``.5``, ``-0``, tabs, a missing final newline).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import BLUE_LOG, CURIE_LOG, KTH_LOG, SAMPLE_LOG, shared_log
from hpcpredict.logs.swf import SWF_FIELDS, SwfFormatError, read_swf
from hpcpredict.logs.swf_table import parse_swf_fast, read_swf_table

FLOAT_INDEXES = {SWF_FIELDS.index(name) for name in ("avg_cpu_s", "used_memory_kb", "requested_memory_kb")}

valid_int = st.one_of(
    st.integers(min_value=-1, max_value=10**6).map(str),
    st.sampled_from(["-1", "0", "-0", "007", "9223372036854775807", "-9223372036854775808"]),
)
valid_float = st.one_of(
    valid_int,
    st.sampled_from(["186.92", "0.5", ".5", "5.", "-0.0", "-.25", "1.000000000000000001", "3.14159265358979323846"]),
    st.floats(min_value=0, max_value=1e9, allow_nan=False).map(repr).filter(lambda t: "e" not in t),
)
# What a C parser might take and the careful reader refuses, or the reverse.
bad_token = st.sampled_from([
    "1.0", "3.", "5-3", "-", "--5", ".", "1.2.3", "+3", "1e5", "nan", "inf", "1_000", "\u0661",
    "99999999999999999999", "1" * 400, "0x10", "1,5", ";",
])


@st.composite
def job_line(draw: st.DrawFn) -> str:
    fields = [draw(valid_float if index in FLOAT_INDEXES else valid_int) for index in range(18)]
    if draw(st.integers(0, 4)) == 0:  # one field in five lines malformed
        fields[draw(st.integers(0, 17))] = draw(bad_token)
    if draw(st.integers(0, 15)) == 0:
        fields = fields[: draw(st.integers(0, 17))] if draw(st.booleans()) else fields + ["1"]
    separator = draw(st.sampled_from([" ", "  ", "\t", " \t "]))
    return draw(st.sampled_from(["", " ", "  "])) + separator.join(fields) + draw(st.sampled_from(["", " ", "\t"]))


header_line = st.sampled_from([
    "; Version: 2.2", "; MaxProcs: 100", "; MaxProcs: 80640", "; UnixStartTime: 843480031",
    "; TimeZoneString: Europe/Paris", "; Note: free text", ";", "  ; indented comment",
    "; MaxProcs: many", "; Computer: caf\u00e9",
])
other_line = st.sampled_from(["", "   ", "; a comment in the body", "\t"])


@st.composite
def swf_text(draw: st.DrawFn) -> str:
    lines = draw(st.lists(header_line | other_line, max_size=4))
    body = draw(st.lists(job_line() | other_line, min_size=0, max_size=8)
                if draw(st.integers(0, 5)) == 0 else st.lists(job_line(), min_size=1, max_size=8))
    ending = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    text = ending.join(lines + body)
    return text + (ending if draw(st.booleans()) else "")


@st.composite
def clean_swf_text(draw: st.DrawFn) -> str:
    """Files as the archive's cleaned logs are: a typed header, then only well-formed job lines
    (numbers the careful reader and a C parser read alike), one space apart, Unix line ends. The
    fast path exists for these: it must take every one (the property above returns early on the
    files it leaves to the careful reader, most of those it is drawn)."""
    header = draw(st.lists(st.sampled_from(["; Version: 2.2", "; MaxProcs: 100", "; UnixStartTime: 843480031",
                                            "; Note: free text", ";"]), max_size=4))
    number = st.one_of(st.integers(min_value=-1, max_value=10**6).map(str), st.just("-1"))
    fraction = st.one_of(number, st.sampled_from(["186.92", "0.5", "12.25"]))
    lines = draw(st.lists(st.builds(lambda fields: " ".join(fields), st.tuples(
        *[fraction if index in FLOAT_INDEXES else number for index in range(18)])), min_size=1, max_size=8))
    return "\n".join(header + lines) + "\n"


def outcome(read, path: Path, lenient: bool) -> tuple[object, ...]:
    """What a reader makes of `path`: its error's text, or everything a log carries."""
    try:
        log = read(path, lenient=lenient)
    except SwfFormatError as error:
        return ("error", str(error), error.line_no, error.field_no, error.skippable)
    records = log.records() if callable(log.records) else log.records
    return ("log", records, log.header, log.skipped_lines, log.body_comments, log.blank_lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=swf_text(), compress=st.booleans(), lenient=st.booleans())
def test_the_table_reader_gives_what_the_careful_reader_gives(tmp_path, text, compress, lenient):
    data = text.encode("utf-8", "surrogateescape")
    path = tmp_path / ("log.swf.gz" if compress else "log.swf")
    path.write_bytes(gzip.compress(data) if compress else data)
    assert outcome(read_swf_table, path, lenient) == outcome(read_swf, path, lenient)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=swf_text())
def test_the_fast_path_accepts_only_what_the_careful_reader_accepts_with_the_same_values(tmp_path, text):
    data = text.encode("utf-8", "surrogateescape")
    table = parse_swf_fast(data, path=str(tmp_path / "log.swf"))
    if table is None:
        return
    path = tmp_path / "log.swf"
    path.write_bytes(data)
    log = read_swf(path)  # strict: raises if the fast path took a file it should not have
    assert table.records() == log.records
    assert (table.header, table.blank_lines) == (log.header, log.blank_lines)
    assert log.body_comments == [] and log.skipped_lines == []
    for name in SWF_FIELDS:  # the same IEEE values, -0.0 included
        assert [repr(v) for v in table.columns[name].tolist()] == [repr(getattr(r, name)) for r in log.records]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=clean_swf_text())
def test_the_fast_path_takes_every_clean_file_with_the_careful_readers_values(tmp_path, text):
    data = text.encode()
    table = parse_swf_fast(data, path=str(tmp_path / "log.swf"))
    assert table is not None, text
    path = tmp_path / "log.swf"
    path.write_bytes(data)
    log = read_swf(path)
    assert table.records() == log.records and table.header == log.header
    for name in SWF_FIELDS:
        assert [repr(v) for v in table.columns[name].tolist()] == [repr(getattr(r, name)) for r in log.records]


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(st.lists(valid_int, min_size=18, max_size=18).map(" ".join), min_size=1, max_size=20))
def test_plain_job_lines_take_the_fast_path(lines):
    """Not vacuous: ordinary files are read by the C parser (else the tests above prove little)."""
    table = parse_swf_fast(("; MaxProcs: 100\n" + "\n".join(lines) + "\n").encode())
    assert table is not None and len(table) == len(lines)


def test_a_file_the_fast_path_refuses_gets_the_careful_readers_error(tmp_path):
    path = tmp_path / "bad.swf"
    good = " ".join(["1"] * 18)
    path.write_text(f"; MaxProcs: 10\n{good}\n{good.replace('1', '3.', 1)}\n")
    assert parse_swf_fast(path.read_bytes()) is None
    with pytest.raises(SwfFormatError) as info:
        read_swf_table(path)
    assert str(info.value) == f"{path}:3: field 1 (job_id): expected an integer, got '3.'"
    assert read_swf_table(path, lenient=True).skipped_lines == [(3, "field 1 (job_id): expected an integer, got '3.'")]


def test_the_bundled_sample_takes_the_fast_path():
    table = read_swf_table(SAMPLE_LOG)
    assert table.fast and table.records() == read_swf(SAMPLE_LOG).records


@pytest.mark.reallog
@pytest.mark.parametrize("name", [KTH_LOG, BLUE_LOG, CURIE_LOG])
def test_real_logs_take_the_fast_path_with_the_careful_readers_values(name):
    path = shared_log(name)
    calls: list[int] = []
    table = read_swf_table(path, progress=calls.append)
    log = read_swf(path)
    assert table.fast
    assert table.records() == log.records
    assert (table.header, table.blank_lines, table.body_comments) == (log.header, log.blank_lines, log.body_comments)
    assert calls == sorted(calls) and calls[-1] == path.stat().st_size
