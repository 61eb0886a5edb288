"""The cleaning rules of hpcpredict/logs/cleaning.py (docs/method.md §10), one test per rule, plus the
report, the ordering, the drop-count invariant and the published KTH-SP2 kept count."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import KTH_LOG, SAMPLE_LOG, make_record, shared_log
from hpcpredict.logs.cleaning import RULES, CleaningReport, RuleCount, clean
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.logs.swf import SwfRecord, read_swf

RULE_NAMES = tuple(name for name, _ in RULES)


def rec(**overrides: int | float) -> SwfRecord:
    """A record that every rule keeps unchanged (with max_procs_header >= 4); override by name."""
    fields: dict[str, int | float] = dict(
        submit_s=100, wait_s=5, run_s=600, executable_id=11, queue_id=2, partition_id=1
    )
    fields.update(overrides)
    return make_record(**fields)


def activity(report: CleaningReport) -> dict[str, tuple[int, int]]:
    """The rules that dropped or changed anything, as {name: (dropped, changed)}."""
    return {r.name: (r.dropped, r.changed) for r in report.rules if r.dropped or r.changed}


def clean_one(record: SwfRecord, *, max_procs_header: int | None = 100, machine_procs=None):
    jobs, report = clean([record], max_procs_header=max_procs_header, machine_procs=machine_procs)
    assert report.input_count == 1
    assert report.kept_count == len(jobs)
    return jobs, report


# --------------------------------------------------------------------------------------------
# A job no rule touches


def test_a_clean_job_passes_unchanged_with_all_its_fields():
    record = rec(
        job_id=42, submit_s=1234, run_s=500, allocated_procs=8, requested_procs=8,
        requested_time_s=900, status=0, user_id=9, group_id=4, executable_id=17, queue_id=3,
        partition_id=2,
    )  # fmt: skip
    jobs, report = clean_one(record)
    assert activity(report) == {}
    assert report.dropped_count == 0
    assert jobs == [
        Job(
            request=JobRequest(
                job_id=42, submit_s=1234, procs=8, requested_s=900, user_id=9, group_id=4,
                executable_id=17, queue_id=3, partition_id=2,
            ),  # fmt: skip
            run_s=500,
            status=0,
            wait_s=5,  # rec()'s default wait: kept for replaying a history as it happened
        )
    ]
    job = jobs[0]
    assert (job.job_id, job.submit_s, job.procs, job.requested_s, job.user_id) == (
        42, 1234, 8, 900, 9,
    )  # fmt: skip


def test_missing_status_user_group_executable_queue_partition_are_kept_as_minus_one():
    record = rec(status=-1, user_id=-1, group_id=-1, executable_id=-1, queue_id=-1, partition_id=-1)
    jobs, report = clean_one(record)
    assert activity(report) == {}
    (job,) = jobs
    assert job.status == -1
    assert job.request == JobRequest(
        job_id=1, submit_s=100, procs=4, requested_s=3600, user_id=-1
    )  # the JobRequest defaults are -1 too


def test_fields_not_used_do_not_matter():
    """CPU, memory, preceding job and think time never reach the job; the wait only reaches
    `Job.wait_s` (history replay), never the request a predictor sees."""
    base, _ = clean_one(rec())
    other, report = clean_one(
        rec(wait_s=-1, avg_cpu_s=12.5, used_memory_kb=-7.0, requested_memory_kb=1e9,
            preceding_job_id=99, think_time_s=3)
    )  # fmt: skip
    assert [job.request for job in other] == [job.request for job in base]
    assert [(job.run_s, job.status) for job in other] == [(job.run_s, job.status) for job in base]
    assert (base[0].wait_s, other[0].wait_s) == (rec().wait_s, -1)
    assert activity(report) == {}


# --------------------------------------------------------------------------------------------
# One test per rule, in order


@pytest.mark.parametrize(
    ("allocated", "requested"),
    [(101, 4), (4, 101), (101, 101), (101, -1), (-1, 101), (500, 0)],
)
def test_rule_1_procs_above_max_procs(allocated, requested):
    jobs, report = clean_one(rec(allocated_procs=allocated, requested_procs=requested))
    assert jobs == []
    assert activity(report) == {"procs_above_max_procs": (1, 0)}
    assert report.rule("procs_above_max_procs").dropped == 1
    assert report.dropped_count == 1


def test_rule_1_boundary_equal_to_max_procs_is_kept():
    jobs, report = clean_one(rec(allocated_procs=100, requested_procs=100))
    assert [j.procs for j in jobs] == [100]
    assert activity(report) == {}


def test_rule_1_comes_before_the_other_rules():
    # Also bad for rules 4-6: the first rule in order takes it.
    record = rec(allocated_procs=200, run_s=-1, requested_time_s=-1, submit_s=-5)
    _, report = clean_one(record)
    assert activity(report) == {"procs_above_max_procs": (1, 0)}


def test_rule_1_skipped_without_header_max_procs():
    jobs, report = clean_one(rec(allocated_procs=5000, requested_procs=5000), max_procs_header=None)
    assert [j.procs for j in jobs] == [5000]
    rule = report.rule("procs_above_max_procs")
    assert rule.applied is False
    assert (rule.dropped, rule.changed) == (0, 0)
    assert report.max_procs_header is None
    assert any("MaxProcs" in note for note in report.notes)
    assert activity(report) == {}


@pytest.mark.parametrize(("allocated", "requested"), [(-1, -1), (0, 0), (0, -1), (-1, 0)])
def test_rule_2_no_procs(allocated, requested):
    jobs, report = clean_one(rec(allocated_procs=allocated, requested_procs=requested))
    assert jobs == []
    assert activity(report) == {"no_procs": (1, 0)}
    assert report.rule("no_procs").dropped == 1


def test_rule_2_comes_before_rules_4_to_6():
    _, report = clean_one(rec(allocated_procs=-1, requested_procs=-1, run_s=0, submit_s=-1))
    assert activity(report) == {"no_procs": (1, 0)}


@pytest.mark.parametrize("allocated", [-1, 0])
def test_rule_3_allocated_from_requested(allocated):
    jobs, report = clean_one(rec(allocated_procs=allocated, requested_procs=6))
    assert [j.procs for j in jobs] == [6]
    assert activity(report) == {"allocated_from_requested": (0, 1)}
    assert report.rule("allocated_from_requested").changed == 1
    assert report.rule("requested_from_allocated").changed == 0


@pytest.mark.parametrize("requested", [-1, 0])
def test_rule_3_requested_from_allocated(requested):
    jobs, report = clean_one(rec(allocated_procs=9, requested_procs=requested))
    assert [j.procs for j in jobs] == [9]
    assert activity(report) == {"requested_from_allocated": (0, 1)}
    assert report.rule("requested_from_allocated").changed == 1
    assert report.rule("allocated_from_requested").changed == 0


def test_procs_are_the_requested_ones_when_fewer_than_allocated():
    """Requested 4 (field 8), allocated 16 (field 5): the job asks for 4."""
    jobs, report = clean_one(rec(allocated_procs=16, requested_procs=4))
    assert [j.procs for j in jobs] == [4]
    assert activity(report) == {}  # not a change: both are known


def test_procs_are_the_requested_ones_when_more_than_allocated():
    """Requested 16 (field 8), allocated 4 (field 5): the job asks for 16."""
    jobs, report = clean_one(rec(allocated_procs=4, requested_procs=16))
    assert [j.procs for j in jobs] == [16]
    assert activity(report) == {}


@pytest.mark.parametrize("run_s", [0, -1, -100])
def test_rule_4_run_time_not_positive(run_s):
    jobs, report = clean_one(rec(run_s=run_s))
    assert jobs == []
    assert activity(report) == {"run_time_not_positive": (1, 0)}
    assert report.rule("run_time_not_positive").dropped == 1


def test_rule_4_comes_before_rules_5_and_6():
    _, report = clean_one(rec(run_s=0, requested_time_s=0, submit_s=-1))
    assert activity(report) == {"run_time_not_positive": (1, 0)}


def test_a_job_changed_by_rule_3_and_dropped_later_counts_in_both():
    # Rule 3 has already filled the allocated count when rule 4 drops the job.
    jobs, report = clean_one(rec(allocated_procs=-1, requested_procs=2, run_s=-1))
    assert jobs == []
    assert activity(report) == {"allocated_from_requested": (0, 1), "run_time_not_positive": (1, 0)}
    assert report.dropped_count == 1


@pytest.mark.parametrize("requested_time_s", [0, -1])
def test_rule_5_requested_time_not_positive(requested_time_s):
    jobs, report = clean_one(rec(requested_time_s=requested_time_s, run_s=10))
    assert jobs == []
    assert activity(report) == {"requested_time_not_positive": (1, 0)}
    assert report.rule("requested_time_not_positive").dropped == 1


def test_rule_5_comes_before_rule_6():
    _, report = clean_one(rec(requested_time_s=-1, submit_s=-1))
    assert activity(report) == {"requested_time_not_positive": (1, 0)}


@pytest.mark.parametrize("submit_s", [-1, -3600])
def test_rule_6_submit_negative(submit_s):
    jobs, report = clean_one(rec(submit_s=submit_s))
    assert jobs == []
    assert activity(report) == {"submit_negative": (1, 0)}
    assert report.rule("submit_negative").dropped == 1


def test_rule_6_submit_zero_is_kept():
    jobs, report = clean_one(rec(submit_s=0))
    assert [j.submit_s for j in jobs] == [0]
    assert activity(report) == {}


def test_rule_7_run_time_above_request_is_set_to_the_request():
    jobs, report = clean_one(rec(run_s=5000, requested_time_s=3600))
    (job,) = jobs
    assert job.run_s == 3600
    assert job.requested_s == 3600  # the request itself is unchanged
    assert activity(report) == {"run_time_above_request": (0, 1)}
    assert report.rule("run_time_above_request").changed == 1
    assert report.rule("run_time_above_request").dropped == 0


def test_rule_7_run_time_equal_to_request_is_unchanged():
    jobs, report = clean_one(rec(run_s=3600, requested_time_s=3600))
    assert [(j.run_s, j.requested_s) for j in jobs] == [(3600, 3600)]
    assert activity(report) == {}


def test_rule_8_procs_above_machine_are_clamped():
    record = rec(allocated_procs=90, requested_procs=96)
    jobs, report = clean_one(record, max_procs_header=100, machine_procs=64)
    assert [j.procs for j in jobs] == [64]
    assert activity(report) == {"procs_above_machine": (0, 1)}
    assert report.rule("procs_above_machine").applied is True
    assert report.machine_procs == 64


def test_rule_8_clamps_the_requested_procs_not_the_allocated():
    # Allocated 8 fits the machine, but the job's count is the request (96).
    jobs, report = clean_one(rec(allocated_procs=8, requested_procs=96), machine_procs=64)
    assert [j.procs for j in jobs] == [64]
    assert activity(report) == {"procs_above_machine": (0, 1)}
    # And allocated above the machine does not matter when the request fits.
    jobs, report = clean_one(rec(allocated_procs=96, requested_procs=8), machine_procs=64)
    assert [j.procs for j in jobs] == [8]
    assert activity(report) == {}


def test_rule_8_boundary_and_without_machine_procs():
    jobs, report = clean_one(rec(allocated_procs=64, requested_procs=64), machine_procs=64)
    assert [j.procs for j in jobs] == [64]
    assert activity(report) == {}
    jobs, report = clean_one(rec(allocated_procs=96, requested_procs=96), machine_procs=None)
    assert [j.procs for j in jobs] == [96]
    assert report.rule("procs_above_machine").applied is False
    assert report.machine_procs is None
    assert report.notes == []  # only a missing MaxProcs deserves a note


def test_rules_7_and_8_change_the_same_job():
    jobs, report = clean_one(
        rec(requested_procs=-1, allocated_procs=80, run_s=99, requested_time_s=60), machine_procs=50
    )
    assert [(j.procs, j.run_s, j.requested_s) for j in jobs] == [(50, 60, 60)]
    assert activity(report) == {
        "requested_from_allocated": (0, 1),
        "run_time_above_request": (0, 1),
        "procs_above_machine": (0, 1),
    }
    assert report.dropped_count == 0


@pytest.mark.parametrize("machine_procs", [0, -1])
def test_machine_procs_must_be_positive(machine_procs):
    with pytest.raises(ValueError, match="machine_procs"):
        clean([rec()], max_procs_header=100, machine_procs=machine_procs)


def test_both_optional_rules_reported_as_not_applied():
    _, report = clean([rec()], max_procs_header=None, machine_procs=None)
    applied = {r.name: r.applied for r in report.rules}
    assert applied == {name: name not in ("procs_above_max_procs", "procs_above_machine") for name in RULE_NAMES}
    _, report = clean([rec()], max_procs_header=100, machine_procs=100)
    assert all(r.applied for r in report.rules)
    assert report.notes == []


# --------------------------------------------------------------------------------------------
# Order


def test_output_is_stable_sorted_by_submit_time_and_out_of_order_counted():
    records = [
        rec(job_id=1, submit_s=50),
        rec(job_id=2, submit_s=10),  # listed after a later submission: 1
        rec(job_id=3, submit_s=10),
        rec(job_id=4, submit_s=70),
        rec(job_id=5, submit_s=20),  # 2
        rec(job_id=6, submit_s=10),  # 3
        rec(job_id=7, submit_s=70),
    ]
    jobs, report = clean(records, max_procs_header=100)
    assert [(j.job_id, j.submit_s) for j in jobs] == [
        (2, 10), (3, 10), (6, 10), (5, 20), (1, 50), (4, 70), (7, 70),
    ]  # fmt: skip
    assert report.out_of_order_count == 3
    assert report.kept_count == 7


def test_sorted_input_has_no_out_of_order_jobs():
    records = [rec(job_id=i, submit_s=s) for i, s in enumerate([0, 0, 5, 5, 9], start=1)]
    jobs, report = clean(records, max_procs_header=100)
    assert [j.job_id for j in jobs] == [1, 2, 3, 4, 5]
    assert report.out_of_order_count == 0


def test_out_of_order_is_counted_among_kept_jobs_only():
    records = [
        rec(job_id=1, submit_s=50),
        rec(job_id=2, submit_s=10, run_s=0),  # dropped: its early submit time does not count
        rec(job_id=3, submit_s=60),
    ]
    jobs, report = clean(records, max_procs_header=100)
    assert [j.job_id for j in jobs] == [1, 3]
    assert report.out_of_order_count == 0


def test_clean_accepts_any_iterable_and_empty_input():
    jobs, report = clean((rec(job_id=i) for i in range(3)), max_procs_header=10)
    assert [j.job_id for j in jobs] == [0, 1, 2]
    assert report.input_count == 3
    jobs, report = clean([], max_procs_header=10)
    assert jobs == []
    assert (report.input_count, report.kept_count, report.dropped_count) == (0, 0, 0)
    assert report.out_of_order_count == 0


# --------------------------------------------------------------------------------------------
# The report


def _mixed_report() -> CleaningReport:
    records = [
        rec(job_id=1),
        rec(job_id=2, allocated_procs=200),  # rule 1
        rec(job_id=3, allocated_procs=-1, requested_procs=-1),  # rule 2
        rec(job_id=4, allocated_procs=-1, requested_procs=2),  # rule 3a
        rec(job_id=5, requested_procs=-1),  # rule 3b
        rec(job_id=6, run_s=0),  # rule 4
        rec(job_id=7, requested_time_s=0),  # rule 5
        rec(job_id=8, submit_s=-1),  # rule 6
        rec(job_id=9, run_s=9999, requested_time_s=10, submit_s=0),  # rule 7, out of order
        rec(job_id=10, allocated_procs=90, requested_procs=90, submit_s=1200),  # rule 8
    ]
    _, report = clean(records, max_procs_header=100, machine_procs=80)
    return report


def test_report_counts_every_rule():
    report = _mixed_report()
    assert [r.name for r in report.rules] == list(RULE_NAMES)
    assert activity(report) == {
        "procs_above_max_procs": (1, 0),
        "no_procs": (1, 0),
        "allocated_from_requested": (0, 1),
        "requested_from_allocated": (0, 1),
        "run_time_not_positive": (1, 0),
        "requested_time_not_positive": (1, 0),
        "submit_negative": (1, 0),
        "run_time_above_request": (0, 1),
        "procs_above_machine": (0, 1),
    }
    assert report.input_count == 10
    assert report.dropped_count == 5
    assert report.kept_count == 5
    assert report.out_of_order_count == 1
    assert (report.max_procs_header, report.machine_procs) == (100, 80)


def test_report_rule_lookup():
    report = _mixed_report()
    rule = report.rule("no_procs")
    assert isinstance(rule, RuleCount)
    assert rule.description == dict(RULES)["no_procs"]
    with pytest.raises(KeyError):
        report.rule("no_such_rule")


def test_report_lines_and_str():
    report = _mixed_report()
    lines = report.lines()
    assert str(report) == "\n".join(lines)
    assert lines[0].split() == ["rule", "dropped", "changed"]
    assert len(lines) == 1 + len(RULES) + 3  # no notes here
    for (name, description), line in zip(RULES, lines[1:]):
        assert line.startswith(description)
        rule = report.rule(name)
        assert line.split()[-2:] == [str(rule.dropped), str(rule.changed)]
    assert lines[-3].startswith("input jobs") and lines[-3].split()[-1] == "10"
    assert lines[-2].startswith("kept jobs") and lines[-2].split()[-1] == "5"
    assert lines[-1].split()[-1] == "1"
    assert len({len(line) for line in lines[: 1 + len(RULES)]}) == 1  # aligned columns


def test_report_lines_show_skipped_rules_notes_and_thousands():
    records = [rec(job_id=i) for i in range(1234)]
    _, report = clean(records, max_procs_header=None)
    lines = report.lines()
    rule_lines = dict(zip(RULE_NAMES, lines[1:]))
    assert rule_lines["procs_above_max_procs"].split()[-1] == "skipped"
    assert rule_lines["procs_above_machine"].split()[-1] == "skipped"
    assert rule_lines["no_procs"].split()[-2:] == ["0", "0"]
    assert any(line.startswith("input jobs") and line.endswith("1,234") for line in lines)
    assert lines[-1].startswith("note: ") and "MaxProcs" in lines[-1]
    assert "skipped" in str(report)


def test_report_to_dict_is_json_ready_and_complete():
    report = _mixed_report()
    data = json.loads(json.dumps(report.to_dict()))
    assert data["input_count"] == 10
    assert data["kept_count"] == 5
    assert data["dropped_count"] == 5
    assert data["max_procs_header"] == 100
    assert data["machine_procs"] == 80
    assert data["out_of_order_count"] == 1
    assert data["notes"] == []
    assert [r["name"] for r in data["rules"]] == list(RULE_NAMES)
    assert data["rules"][0] == {
        "name": "procs_above_max_procs",
        "description": dict(RULES)["procs_above_max_procs"],
        "applied": True,
        "dropped": 1,
        "changed": 0,
    }
    assert data["rules"][-1]["changed"] == 1
    _, skipped = clean([rec()], max_procs_header=None)
    data = skipped.to_dict()
    assert data["max_procs_header"] is None and data["machine_procs"] is None
    assert data["rules"][0]["applied"] is False and data["rules"][-1]["applied"] is False
    assert len(data["notes"]) == 1


# --------------------------------------------------------------------------------------------
# Properties over random records

SMALL = st.one_of(st.just(-1), st.just(0), st.integers(-5, 200))
RECORDS = st.builds(
    rec,
    job_id=st.integers(0, 10**6),
    submit_s=st.integers(-20, 500),
    run_s=st.integers(-5, 5000),
    allocated_procs=SMALL,
    requested_procs=SMALL,
    requested_time_s=st.integers(-5, 5000),
    status=st.sampled_from([-1, 0, 1, 5]),
    user_id=st.integers(-1, 20),
)


def _expected_procs(record: SwfRecord) -> int:
    return record.requested_procs if record.requested_procs > 0 else record.allocated_procs


def _kept_by_definition(record: SwfRecord, max_procs: int | None) -> bool:
    a, r = record.allocated_procs, record.requested_procs
    if max_procs is not None and max(a, r) > max_procs:
        return False
    return max(a, r) > 0 and record.run_s > 0 and record.requested_time_s > 0 and record.submit_s >= 0


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(RECORDS, max_size=40),
    max_procs=st.one_of(st.none(), st.integers(1, 200)),
    machine_procs=st.one_of(st.none(), st.integers(1, 200)),
)
def test_clean_properties(records, max_procs, machine_procs):
    jobs, report = clean(records, max_procs_header=max_procs, machine_procs=machine_procs)
    # The invariant of the report.
    assert report.input_count == len(records)
    assert report.input_count - report.dropped_count == report.kept_count == len(jobs)
    assert report.dropped_count == sum(r.dropped for r in report.rules)
    assert all(r.dropped >= 0 and r.changed >= 0 for r in report.rules)
    # Exactly the jobs the rules' definitions keep, stable-sorted by submit time.
    kept = [r for r in records if _kept_by_definition(r, max_procs)]
    expected_order = sorted(kept, key=lambda r: r.submit_s)
    assert [j.job_id for j in jobs] == [r.job_id for r in expected_order]
    assert report.out_of_order_count == sum(
        1 for a, b in zip(kept, kept[1:]) if b.submit_s < a.submit_s
    )
    for job, record in zip(jobs, expected_order):
        procs = _expected_procs(record)
        if machine_procs is not None:
            procs = min(procs, machine_procs)
        assert job.procs == procs >= 1
        assert job.run_s == min(record.run_s, record.requested_time_s) >= 1
        assert job.requested_s == record.requested_time_s
        assert job.submit_s == record.submit_s >= 0
        assert (job.user_id, job.status) == (record.user_id, record.status)
        if max_procs is not None:
            assert job.procs <= max_procs
    # Change counts match the jobs they describe (changes are counted before later drops).
    passed_rule_2 = [
        r for r in records
        if not (max_procs is not None and max(r.allocated_procs, r.requested_procs) > max_procs)
        and max(r.allocated_procs, r.requested_procs) > 0
    ]  # fmt: skip
    assert report.rule("allocated_from_requested").changed == sum(
        1 for r in passed_rule_2 if r.allocated_procs <= 0
    )
    assert report.rule("requested_from_allocated").changed == sum(
        1 for r in passed_rule_2 if r.requested_procs <= 0
    )
    assert report.rule("run_time_above_request").changed == sum(
        1 for r in kept if r.run_s > r.requested_time_s
    )
    assert report.rule("procs_above_machine").changed == (
        0 if machine_procs is None else sum(1 for r in kept if _expected_procs(r) > machine_procs)
    )
    assert report.rule("procs_above_max_procs").applied is (max_procs is not None)
    assert report.rule("procs_above_machine").applied is (machine_procs is not None)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(RECORDS, max_size=30))
def test_clean_does_not_depend_on_the_iterable_type(records):
    from_list = clean(records, max_procs_header=100)
    from_generator = clean((r for r in records), max_procs_header=100)
    assert from_list[0] == from_generator[0]
    assert from_list[1].to_dict() == from_generator[1].to_dict()


# --------------------------------------------------------------------------------------------
# The sample and the real log


def test_clean_the_shipped_sample():
    log = read_swf(SAMPLE_LOG)
    jobs, report = clean(log.records, max_procs_header=log.header.max_procs)
    assert report.kept_count == len(jobs) == 4997  # swf/README.md: 4,997 jobs after cleaning
    assert activity(report) == {"run_time_not_positive": (3, 0), "run_time_above_request": (0, 70)}
    assert report.out_of_order_count == 0
    assert len({j.user_id for j in jobs}) == 95  # swf/README.md: from 95 users
    assert all(1 <= j.procs <= 100 and 1 <= j.run_s <= j.requested_s for j in jobs)


@pytest.mark.reallog
def test_clean_real_kth_log_keeps_the_published_count():
    log = read_swf(shared_log(KTH_LOG))
    assert log.header.max_procs == 100
    jobs, report = clean(log.records, max_procs_header=100)
    assert report.input_count == 28_489
    assert report.kept_count == len(jobs) == 28_481  # the published reference count
    assert report.dropped_count == 8
    assert activity(report) == {"run_time_not_positive": (8, 0), "run_time_above_request": (0, 475)}
    assert report.out_of_order_count == 0
    assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)
