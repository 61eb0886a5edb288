"""`collector_paused` (hpcpredict/collector.py): the cycle collector off inside, as it was after,
also after an error; the replay and a table's build leave it as they found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from hpcpredict.collector import collector_paused
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload

SAMPLE = Path(__file__).resolve().parents[1] / "swf" / "KTH-SP2-sample.swf"


@pytest.fixture
def restore_collector():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_inside_and_as_it_was_after_even_after_an_error(restore_collector, enabled: bool) -> None:
    gc.enable() if enabled else gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled() is enabled


def test_a_replay_pauses_the_collector_and_gives_it_back(restore_collector, monkeypatch) -> None:
    """A replay in the Python loop (decisions at corrections: the compiled loop, which makes no
    Python object per event, does not model them)."""
    from hpcpredict.sim.easy import simulation

    seen: list[bool] = []
    original = simulation.Simulation._submission

    def watched(self, index: int) -> None:
        seen.append(gc.isenabled())
        original(self, index)

    monkeypatch.setattr(simulation.Simulation, "_submission", watched)
    gc.enable()
    run(load_workload(SAMPLE), RunSpec("easy", "requested", "requested", decide_on_correction=True))
    assert seen and not any(seen)
    assert gc.isenabled()
