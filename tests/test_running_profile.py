"""RunningProfile against the definition of its answers, on random sets of running jobs.

The reservation has two scans (forward from the first predicted end, backward from the last one
for a job that needs most of the busy processors); both must give EASY's definition: the first
predicted end still to come after which the job fits, and what is left over once every job
ending at that instant has given its processors back.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.sim.engine.profile import RunningProfile


def free_after(ends: list[tuple[int, int]], total: int, time_s: int) -> int:
    return total - sum(procs for end_s, procs in ends if end_s > time_s)


def reservation_by_definition(
    ends: list[tuple[int, int]], total: int, needed: int, now_s: int
) -> tuple[int, int]:
    for time_s in sorted({end_s for end_s, _ in ends if end_s > now_s}):
        free = free_after(ends, total, time_s)
        if free >= needed:
            return time_s, free - needed
    raise AssertionError("never fits")


running_jobs = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 12), st.integers(0, 30)), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(1, 200),
    now_s=st.integers(0, 20),
    jobs=running_jobs,
    moved=st.lists(st.integers(0, 39), max_size=10),
)
def test_reservation_free_now_and_ending_by_follow_their_definitions(total, now_s, jobs, moved):
    profile = RunningProfile(total)
    ends: dict[int, tuple[int, int]] = {}
    for job, (end_offset, procs, _) in enumerate(jobs):
        if profile.used_procs + procs > total:
            break
        profile.add(job, now_s, now_s + end_offset, procs, checked=False)
        ends[job] = (now_s + end_offset, procs)
    for job in moved:  # corrections push predicted ends later
        if job in ends:
            end_s, procs = ends[job]
            new_end_s = end_s + 1 + jobs[job][2]
            profile.move(job, end_s, new_end_s)
            ends[job] = (new_end_s, procs)
    listed = [ends[job] for job in sorted(ends, key=lambda job: (ends[job][0], job))]
    assert profile.ends() == listed
    assert profile.used_procs == sum(procs for _, procs in listed) <= total
    free_now = profile.free_now(now_s)
    assert free_now == free_after(listed, total, now_s)
    for by_s in (now_s, now_s + 5, now_s + 40):  # the jobs whose predictions run out by then
        assert profile.ending_by(by_s) == sorted(
            (end_s, job) for job, (end_s, _) in ends.items() if end_s <= by_s
        )
        assert profile.ends_by(by_s) == bool(profile.ending_by(by_s))
    for needed in range(free_now + 1, total + 1):
        assert profile.reservation(needed, now_s) == reservation_by_definition(
            listed, total, needed, now_s
        )


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(1, 200),
    by_s=st.integers(0, 40),
    jobs=running_jobs,
    postponed=st.dictionaries(st.integers(0, 39), st.integers(0, 60), max_size=12),
)
def test_postponing_jobs_by_position_is_moving_them_one_by_one(total, by_s, jobs, postponed):
    """`postpone` (the corrections before an event, by position) leaves the profile as `move`
    job by job does, whatever the new ends (before, at or after `by_s`)."""
    by_position, one_by_one = RunningProfile(total), RunningProfile(total)
    for job, (end_s, procs, _) in enumerate(jobs):
        if by_position.used_procs + procs > total:
            break
        by_position.add(job, 0, end_s, procs, checked=False)
        one_by_one.add(job, 0, end_s, procs, checked=False)
    moves = []
    for position, (end_s, job) in enumerate(by_position.ending_by(by_s)):
        if job in postponed:
            moves.append((position, end_s + postponed[job]))
            one_by_one.move(job, end_s, end_s + postponed[job])
    if moves:
        by_position.postpone(moves)
    assert by_position.ends() == one_by_one.ends()
    assert by_position.ending_by(10**6) == one_by_one.ending_by(10**6)
    assert by_position.used_procs == one_by_one.used_procs
