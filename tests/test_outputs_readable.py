"""Plots and outputs a sysadmin reads (issue 28, item 9): readable ticks, labelled points, history
and live apart, plurals, the E-Loss by its name, and defaults and --help examples that do not
write into the source tree. Each test failed on main at 195fcb0.

The figures are inspected as matplotlib draws them (their tick labels, lines, texts and legends),
on real data: the bundled KTH-SP2 sample through `hpcpredict train` and a small campaign.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import matplotlib
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.experiments.campaign import load_campaign

matplotlib.use("Agg")

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = REPO_ROOT / "swf" / "KTH-SP2-sample.swf"


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Every figure saved while the test runs, by file name, drawn (tick labels resolved)."""
    from matplotlib.figure import Figure

    figures: dict[str, object] = {}
    original = Figure.savefig

    def savefig(self, path, *args, **kwargs):  # noqa: ANN001 - matplotlib's signature
        original(self, path, *args, **kwargs)
        self.canvas.draw()
        figures[Path(getattr(path, "name", path)).name] = self  # a file, or the report's bytes named as one

    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setattr("matplotlib.pyplot.close", lambda *args: None)  # keep them to inspect
    return figures


def tick_labels(axis) -> list[str]:  # noqa: ANN001 - a matplotlib Axis
    return [label.get_text() for label in axis.get_ticklabels() if label.get_text()]


def test_error_ecdf_has_no_ticks_printed_over_each_other_around_zero(tmp_path: Path,
                                                                     saved_figures: dict) -> None:
    """Was "-10^1 0 10^1" within a few pixels: symlog's ticks inside its linear region."""
    url = f"sqlite:///{tmp_path}/h.db"
    assert CliRunner().invoke(main, ["train", str(SAMPLE), "--db", url]).exit_code == 0
    result = CliRunner().invoke(main, ["report", "--db", url, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    ax = saved_figures["error_ecdf.png"].axes[0]
    ticks = [tick for tick in ax.get_xticks() if ax.get_xlim()[0] <= tick <= ax.get_xlim()[1]]
    assert 0 in ticks and all(tick == 0 or abs(tick) >= 600 for tick in ticks), ticks
    labels = tick_labels(ax.xaxis)
    assert "0" in labels and "10 min" in labels and "-10 min" in labels
    assert not any("10^" in label or "$" in label for label in labels), labels


def test_error_over_time_keeps_history_and_live_apart_with_the_legend_outside(
        tmp_path: Path, saved_figures: dict) -> None:
    """Was one line mixing `train`'s replay with live jobs, under a legend over the data."""
    from hpcpredict.daemon.core.judged_errors import judged_jobs
    from hpcpredict.daemon.core.store import Store
    from hpcpredict.daemon.views.pages import error_table
    from hpcpredict.daemon.views.report_figures import draw_figures

    url = f"sqlite:///{tmp_path}/h.db"
    assert CliRunner().invoke(main, ["train", str(SAMPLE), "--db", url]).exit_code == 0
    store = Store(url)
    try:
        judged = judged_jobs(store, source="both")
    finally:
        store.close()
    live = judged.tail(300).index
    judged.loc[live, "source"] = "live"  # the last 300 as if the daemon had judged them
    draw_figures(judged, error_table(judged))
    figure = saved_figures["error_over_time.png"]
    for ax in figure.axes:
        assert ax.get_legend() is None  # none inside a plot
        colors = {line.get_color() for line in ax.get_lines() if len(line.get_xdata())}
        assert len(colors) == 2, colors  # a history line and a live line
    (legend,) = figure.legends
    assert [text.get_text() for text in legend.get_texts()] == ["history replay (train)", "live (the daemon)"]
    legend_box = legend.get_window_extent()
    for ax in figure.axes:
        assert not legend_box.overlaps(ax.get_window_extent())


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("smoke") / "runs.jsonl"
    result = CliRunner().invoke(main, ["campaign", str(REPO_ROOT / "sim" / "smoke.toml"), "--store", str(store)])
    assert result.exit_code == 0, result.output
    return store


def test_campaign_report_defaults_to_the_current_folder(smoke_runs: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        saved_figures: dict) -> None:
    """Was sim/results/smoke/ inside the checkout, not ignored by git."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["campaign-report", str(REPO_ROOT / "sim" / "smoke.toml"),
                                       "--store", str(smoke_runs)])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "smoke-report" / "report.md").read_text()
    assert not (REPO_ROOT / "sim" / "results" / "smoke").exists()
    # plurals, and the E-Loss by its name
    assert "7 runs on 1 log, 1 replica each" in report
    assert "learned E-Loss (over=square,under=linear,weight=large_area) + incremental" in report
    # every point of triples_per_log.png named; plain numbers on its log axis
    ax = saved_figures["triples_per_log.png"].axes[0]
    names = [text.get_text() for text in ax.texts]
    assert sorted(names) == sorted(["E-Loss + incremental", "E-Loss + doubling",
                                    "linear/square/constant + incremental", "linear/square/constant + doubling"])
    labels = tick_labels(ax.yaxis)
    assert len(labels) >= 2 and all(label.replace(",", "").isdigit() for label in labels), labels


def test_tracked_campaigns_keep_their_documented_results_folder() -> None:
    for path in sorted((REPO_ROOT / "sim").glob("*.toml")):
        campaign = load_campaign(path)
        if path.name == "smoke.toml":
            assert campaign.default_report_dir == Path("smoke-report")
        else:
            assert campaign.default_report_dir == REPO_ROOT / "sim" / "results" / campaign.name
            assert campaign.default_report_dir.is_dir(), path


def _examples() -> list[list[str]]:
    from test_cli_help import examples

    return [words for command in [main, *main.all_commands().values()] for words in examples(command)]


WRITING_OPTIONS = ("--db", "--out", "-o", "--output", "--csv", "--plots", "--store")


def test_help_examples_write_nothing_into_the_checkout() -> None:
    """Was `--db sqlite:///hpcpredict.db`, `--out error-report`, ... relative to the repository,
    and `train ... --config deploy/daemon.toml --replace`, which replaces a production model."""
    for words in _examples():
        line = shlex.join(words)
        for option, value in zip(words, words[1:]):
            if option not in WRITING_OPTIONS:
                continue
            path = value.removeprefix("sqlite:///") if value.startswith("sqlite:///") else value
            assert "://" in path or path.startswith("/"), f"hpcpredict {line}: {option} {value} is relative"
        if "--replace" in words:
            assert "--config" not in words and any(word.startswith("sqlite:////tmp/") for word in words), line


def test_campaign_report_of_a_campaign_without_baselines(tmp_path: Path, saved_figures: dict) -> None:
    """A campaign of learned runs only (sim/bound-kth.toml is one): the triples plot's axis range
    was taken with max() over one value and crashed the report."""
    campaign = tmp_path / "learned-only.toml"
    campaign.write_text(f'''name = "learned-only"
[[logs]]
name = "KTH-SP2-sample"
path = "{REPO_ROOT / 'swf' / 'KTH-SP2-sample.swf'}"
[learned]
losses = ["eloss"]
corrections = ["incremental", "doubling"]
schedulers = ["easy-sjbf"]
''')
    store = tmp_path / "runs.jsonl"
    ran = CliRunner().invoke(main, ["campaign", str(campaign), "--store", str(store)])
    assert ran.exit_code == 0, ran.output
    report = CliRunner().invoke(main, ["campaign-report", str(campaign), "--store", str(store),
                                       "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    ax = saved_figures["triples_per_log.png"].axes[0]
    assert sorted(text.get_text() for text in ax.texts) == ["E-Loss + doubling", "E-Loss + incremental"]
