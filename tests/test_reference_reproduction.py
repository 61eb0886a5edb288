"""The reference's baseline AVEbsld on the full archive logs (docs/method.md §10), to the hundredth.

These involve no learning, so any difference is a cleaning or simulator difference. All fifteen
reproduce exactly (docs/reproduction.md); the tolerance is rounding only.
"""

from __future__ import annotations

import pytest

from conftest import BLUE_LOG, CURIE_LOG, KTH_LOG, shared_log
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.workload import load_workload

EASY = RunSpec("easy", "requested", "requested")
SJBF = RunSpec("easy-sjbf", "requested", "requested")
EASY_PLUS_PLUS = RunSpec("easy-sjbf", "ave2", "incremental")
CLAIRVOYANT_EASY = RunSpec("easy", "clairvoyant", "requested")
CLAIRVOYANT_SJBF = RunSpec("easy-sjbf", "clairvoyant", "requested")
SPECS = (EASY, SJBF, EASY_PLUS_PLUS, CLAIRVOYANT_EASY, CLAIRVOYANT_SJBF)

# log -> (machine procs override, kept jobs, AVEbsld of SPECS in order), docs/method.md §10.
REFERENCE = {
    KTH_LOG: (None, 28_481, (92.58, 69.41, 63.50, 71.72, 49.85)),
    BLUE_LOG: (None, 232_542, (36.52, 19.83, 20.99, 30.62, 13.18)),
    CURIE_LOG: (80_640, 295_540, (202.13, 169.03, 193.47, 69.93, 12.08)),
}


def _check(log_name: str) -> None:
    procs, kept, expected = REFERENCE[log_name]
    workload = load_workload(shared_log(log_name), machine_procs=procs)
    assert len(workload.jobs) == kept
    measured = tuple(round(compute_metrics(run(workload, spec)).ave_bsld, 2) for spec in SPECS)
    assert measured == pytest.approx(expected, abs=0.005)


@pytest.mark.reallog
def test_kth_sp2_baselines_match_the_reference() -> None:
    _check(KTH_LOG)


@pytest.mark.reallog
@pytest.mark.slow
def test_sdsc_blue_baselines_match_the_reference() -> None:
    _check(BLUE_LOG)


@pytest.mark.reallog
@pytest.mark.slow
def test_cea_curie_baselines_match_the_reference() -> None:
    _check(CURIE_LOG)
