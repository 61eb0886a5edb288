"""Shared fixtures: the real logs of ../shared/swf (skipped cleanly where absent) and the sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcpredict.swf import SwfRecord

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_LOG = REPO_ROOT / "swf" / "KTH-SP2-sample.swf"
SHARED_SWF_DIR = REPO_ROOT.parent / "shared" / "swf"

KTH_LOG = "KTH-SP2-1996-2.swf.gz"
BLUE_LOG = "SDSC-BLUE-2000-4.1-cln.swf.gz"
CURIE_LOG = "CEA-Curie-2011-2.1-cln.swf.gz"


def shared_log(name: str) -> Path:
    """Path of a real log in ../shared/swf; skips the calling test when it is not there."""
    path = SHARED_SWF_DIR / name
    if not path.is_file():
        pytest.skip(f"real log {name} not found in {SHARED_SWF_DIR} (see ../shared/README.md)")
    return path


@pytest.fixture
def sample_log() -> Path:
    return SAMPLE_LOG


def make_record(**overrides: int | float) -> SwfRecord:
    """A valid SWF record with sensible defaults; override any field by name."""
    values: dict[str, int | float] = {
        "job_id": 1,
        "submit_s": 0,
        "wait_s": 10,
        "run_s": 100,
        "allocated_procs": 4,
        "avg_cpu_s": -1.0,
        "used_memory_kb": -1.0,
        "requested_procs": 4,
        "requested_time_s": 3600,
        "requested_memory_kb": -1.0,
        "status": 1,
        "user_id": 7,
        "group_id": 3,
        "executable_id": -1,
        "queue_id": -1,
        "partition_id": -1,
        "preceding_job_id": -1,
        "think_time_s": -1,
    }
    unknown = set(overrides) - set(values)
    assert not unknown, f"not SWF fields: {sorted(unknown)}"
    values.update(overrides)
    return SwfRecord(**values)  # type: ignore[arg-type]
