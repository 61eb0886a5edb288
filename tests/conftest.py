"""Shared fixtures: the real logs of ../shared/swf (skipped cleanly where absent) and the sample."""

from __future__ import annotations

from pathlib import Path

import pytest

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
