"""Campaign reports: the reference's Table 2.6/2.7 kind, leave-one-log-out, correlations, plots.

Everything here is a pure function of the stored runs (`CampaignStore.frame()`): a *triple* is
one learned configuration (loss x correction x backfilling, with its learning constants), a
*baseline* any non-learned run, identified by its label.

Leave-one-log-out is the honest way to pick a configuration for a log nobody has seen yet: for
each log, choose the triple with the lowest summed AVEbsld over the *other* logs, then score it
on the held-out one. A triple that only shines on the log it is scored on cannot be chosen.

With shaken replicas every table is of means over the replicas stored for a (configuration, log),
leave-one-log-out chooses on those means, and the replica section pairs each configuration with
EASY++ replica by replica (`replica_stats.paired_difference`): the difference's 95% CI and how
many replicas it won, beside the mean p99 and max wait.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hpcpredict.sim.replica_stats import PairedDifference, mean_ci, paired_difference

BASELINE_ORDER = ("EASY", "EASY-SJBF", "EASY++", "clairvoyant EASY", "clairvoyant EASY-SJBF")


def learned_table(runs: pd.DataFrame) -> pd.DataFrame:
    """AVEbsld of every learned triple (rows) on every log (columns)."""
    learned = runs[runs["predictor"] == "learned"]
    return learned.pivot_table(index="label", columns="log", values="ave_bsld", aggfunc="mean")


def baseline_table(runs: pd.DataFrame) -> pd.DataFrame:
    """AVEbsld of every baseline (rows, known ones first) on every log (columns)."""
    baselines = runs[runs["predictor"] != "learned"]
    table = baselines.pivot_table(index="label", columns="log", values="ave_bsld", aggfunc="mean")
    order = [b for b in BASELINE_ORDER if b in table.index]
    order += sorted(label for label in table.index if label not in order)
    return table.loc[order]


@dataclass(frozen=True)
class LooChoice:
    held_out: str
    triple: str
    score_on_others: float  # summed AVEbsld on the other logs
    ave_bsld: float  # on the held-out log
    rank: int  # 1 = the best triple on the held-out log
    of: int  # how many triples were ranked
    best_on_held_out: float


def leave_one_log_out(table: pd.DataFrame, allowed: pd.DataFrame | None = None) -> list[LooChoice]:
    """For each log (column), the triple with the best summed AVEbsld on the other logs.

    Only triples with a result on every log compete; ties go to the first label in sorted
    order, so the choice is deterministic. With `allowed` (a boolean table shaped like `table`),
    only triples allowed on every *other* log compete for a held-out log: a constraint judged,
    like the score, without looking at the log it is scored on. A log for which no triple is
    allowed gets no choice.
    """
    complete = table.dropna().sort_index()
    if complete.shape[1] < 2:
        raise ValueError("leave-one-log-out needs results on at least two logs")
    choices = []
    for log in complete.columns:
        others = complete.drop(columns=log).sum(axis=1)
        if allowed is not None:
            permitted = allowed.reindex(index=complete.index, columns=complete.columns)
            permitted = permitted.drop(columns=log).fillna(False).astype(bool).all(axis=1)
            others = others[permitted]
            if others.empty:
                continue
        triple = str(others.idxmin())  # first minimum in sorted label order
        held = complete[log]
        choices.append(
            LooChoice(
                held_out=str(log),
                triple=triple,
                score_on_others=float(others[triple]),
                ave_bsld=float(held[triple]),
                rank=int((held < held[triple]).sum()) + 1,
                of=len(held),
                best_on_held_out=float(held.min()),
            )
        )
    return choices


def replica_summary(
    runs: pd.DataFrame, labels: list[str], reference: str = "EASY++"
) -> pd.DataFrame:
    """Per (configuration, log): replicas, AVEbsld mean and 95% CI, mean p99 and max wait (h) and
    their CIs, and the paired differences of AVEbsld, p99 and max wait against `reference` on the
    same replicas."""
    if "replica" not in runs:  # runs of a single replay
        runs = runs.assign(replica=0)
    rows = []
    for (label, log), group in runs[runs["label"].isin(labels)].groupby(["label", "log"], sort=False):
        group = group.sort_values("replica")
        estimate = mean_ci(group["ave_bsld"].to_numpy())
        row: dict[str, object] = {
            "configuration": label, "log": log, "replicas": len(group),
            "AVEbsld": estimate.mean, "CI low": estimate.ci_low, "CI high": estimate.ci_high,
            # runs stored before p99 wait was measured have none
            "p99 wait h": group["m_p99_wait_s"].mean() / 3600 if "m_p99_wait_s" in group else np.nan,
            "max wait h": group["m_max_wait_s"].mean() / 3600 if "m_max_wait_s" in group else np.nan,
        }
        for metric, name in (("m_p99_wait_s", "p99 wait h"), ("m_max_wait_s", "max wait h")):
            if metric in group and len(group) > 1:  # the waits' 95% CIs, in hours
                wait = mean_ci(group[metric].to_numpy() / 3600)
                row[f"{name} CI"] = f"{wait.ci_low:,.1f}-{wait.ci_high:,.1f}"
        others = runs[(runs["label"] == reference) & (runs["log"] == log)]
        paired = group.merge(others, on="replica", suffixes=("", "_ref"))
        if label != reference and len(paired):
            for metric, name in (("ave_bsld", "AVEbsld"), ("m_p99_wait_s", "p99 wait"),
                                 ("m_max_wait_s", "max wait")):
                if metric not in paired:
                    continue
                difference = paired_difference(paired[metric].to_numpy(),
                                               paired[f"{metric}_ref"].to_numpy())
                row[f"{name} vs {reference}"] = _relative_ci(difference)
                if metric == "ave_bsld":
                    row[f"wins vs {reference}"] = f"{difference.wins}/{difference.n}"
                    row["sign test p"] = difference.sign_p_value
        rows.append(row)
    return pd.DataFrame(rows).set_index(["configuration", "log"]) if rows else pd.DataFrame()


def _relative_ci(difference: PairedDifference) -> str:
    if difference.n < 2:
        return f"{difference.relative:+.1%}"
    mark = " *" if difference.significant else ""
    return (f"{difference.relative:+.1%} [{difference.relative_ci_low:+.1%}, "
            f"{difference.relative_ci_high:+.1%}]{mark}")


STARVATION_BOUND = 1.25  # mean max wait at most this multiple of plain EASY's


def mean_max_wait(runs: pd.DataFrame) -> pd.DataFrame | None:
    """label x log: the max wait, averaged over the replicas (None when runs carry none)."""
    if "m_max_wait_s" not in runs:
        return None
    return runs.pivot_table(index="label", columns="log", values="m_max_wait_s", aggfunc="mean")


def within_starvation_bound(
    max_wait: pd.DataFrame, reference: str = "EASY", bound: float = STARVATION_BOUND
) -> pd.DataFrame | None:
    """label x log: is the mean max wait (`mean_max_wait`) at most `bound` x the reference's?

    None without a reference run. A site that deploys predictions accepts a better average only
    if no job waits far longer than it would under plain EASY.
    """
    if reference not in max_wait.index:
        return None
    return max_wait.le(max_wait.loc[reference] * bound)


def log_correlations(table: pd.DataFrame) -> pd.DataFrame:
    """Pearson correlation of triples' AVEbsld between each pair of logs."""
    return table.dropna().corr(method="pearson")


def write_campaign_report(
    runs: pd.DataFrame, out_dir: Path, title: str, pair_with: tuple[str, ...] = ()
) -> list[Path]:
    """Markdown, CSV and PNG files of the campaign's report into `out_dir`; returns the paths.

    Each label of `pair_with` gets a section of its own pairing every configuration with it, as
    EASY++ is paired below (e.g. a new option against the current default)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    learned = learned_table(runs)
    baselines = baseline_table(runs)
    logs = sorted(set(runs["log"]), key=list(runs["log"]).index)
    written: list[Path] = []

    def save_csv(frame: pd.DataFrame, name: str) -> None:
        path = out_dir / name
        frame.to_csv(path)
        written.append(path)

    save_csv(runs.set_index("key"), "runs.csv")
    save_csv(baselines, "baselines.csv")
    save_csv(learned, "learned.csv")
    lines = [f"# {title}", ""]
    replicas = int(runs["replica"].max()) + 1 if "replica" in runs and len(runs) else 1
    lines += [f"{_count(len(runs), 'run')} on {_count(len(logs), 'log')}, "
              f"{'1 replica' if replicas == 1 else f'up to {replicas} replicas'} each; total "
              f"simulation time {runs['wall_time_s'].sum() / 3600:.2f} h (one core each)."]
    lines += ["Every AVEbsld below is the mean over the replicas stored." if replicas > 1 else
              "One replay per configuration: differences below ~20% may be chaos, not effect.", ""]
    lines += ["## Baselines and learned triples per log (AVEbsld)", ""]
    per_log = pd.DataFrame(index=[*baselines.index, "best learned", "worst learned", "best triple",
                                  "worst triple"], columns=logs, dtype=object)
    for log in logs:
        for label in baselines.index:
            per_log.loc[label, log] = _fmt(baselines.loc[label].get(log))
        if log in learned.columns and learned[log].notna().any():
            column = learned[log].dropna()
            per_log.loc["best learned", log] = _fmt(column.min())
            per_log.loc["worst learned", log] = _fmt(column.max())
            per_log.loc["best triple", log] = str(column.idxmin())
            per_log.loc["worst triple", log] = str(column.idxmax())
    save_csv(per_log, "per_log.csv")
    lines += [_markdown(per_log), ""]

    if learned.shape[1] >= 2 and not learned.dropna().empty:
        choices = leave_one_log_out(learned[[log for log in logs if log in learned.columns]])
        loo = pd.DataFrame([choice.__dict__ for choice in choices]).set_index("held_out")
        for baseline in ("EASY", "EASY++"):
            if baseline in baselines.index:
                loo[f"vs {baseline}"] = [
                    f"{c.ave_bsld / baselines.loc[baseline, c.held_out] - 1:+.1%}" for c in choices
                ]
        save_csv(loo, "loo.csv")
        lines += ["## Leave-one-log-out selection", "",
                  "For each log, the triple with the lowest summed AVEbsld on the other logs, "
                  "scored on that log.", "", _markdown(loo), ""]
        chosen = sorted({choice.triple for choice in choices})
        max_wait = mean_max_wait(runs)
        allowed = None if max_wait is None else within_starvation_bound(max_wait)
        if allowed is not None:
            bounded = leave_one_log_out(
                learned[[log for log in logs if log in learned.columns]], allowed=allowed
            )
            frame = pd.DataFrame([choice.__dict__ for choice in bounded])
            if not frame.empty:
                frame = frame.set_index("held_out")
                frame["max wait / EASY's"] = [
                    f"{max_wait.loc[c.triple, c.held_out] / max_wait.loc['EASY', c.held_out]:.2f}"
                    for c in bounded
                ]
                frame["within bound on held-out"] = [bool(allowed.loc[c.triple, c.held_out])
                                                     for c in bounded]
                if "EASY++" in baselines.index:
                    frame["vs EASY++"] = [
                        f"{c.ave_bsld / baselines.loc['EASY++', c.held_out] - 1:+.1%}"
                        for c in bounded
                    ]
                save_csv(frame, "loo_bounded.csv")
                chosen = sorted(set(chosen) | {choice.triple for choice in bounded})
            lines += ["## Leave-one-log-out selection under the starvation bound", "",
                      f"As above, but a triple competes for a held-out log only if its mean max "
                      f"wait is at most {STARVATION_BOUND}x plain EASY's on every other log.", "",
                      _markdown(frame) if not frame.empty else "No triple meets the bound.", ""]
    else:
        chosen = []
    best = [str(learned[log].dropna().idxmin()) for log in learned.columns if learned[log].notna().any()]
    labels = list(dict.fromkeys([*baselines.index, *chosen, *best]))
    summary = replica_summary(runs, labels)
    if not summary.empty:
        order = sorted(summary.index, key=lambda key: (logs.index(key[1]), labels.index(key[0])))
        summary = summary.loc[order]
        save_csv(summary, "replicas.csv")
        lines += ["## Means over replicas, paired against EASY++", "",
                  "AVEbsld mean and its 95% Student-t CI over the replicas; waits are means over "
                  "the replicas, in hours; 'vs EASY++' is the paired relative difference with its "
                  "95% CI (* = the CI excludes 0) and the replicas won.", "",
                  _markdown(summary.reset_index().set_index("log")), ""]
    for reference in pair_with:
        every = list(dict.fromkeys([*baselines.index, *learned.index]))
        paired = replica_summary(runs, every, reference=reference)
        if paired.empty:
            continue
        order = sorted(paired.index, key=lambda key: (logs.index(key[1]), every.index(key[0])))
        paired = paired.loc[order]
        slug = re.sub(r"[^a-z0-9]+", "_", reference.lower()).strip("_")
        save_csv(paired, f"replicas_vs_{slug}.csv")
        lines += [f"## Means over replicas, paired against {reference}", "",
                  f"As above, every configuration paired with {reference} on the same replicas.",
                  "", _markdown(paired.reset_index().set_index("log")), ""]
    if learned.shape[1] >= 2 and not learned.dropna().empty:
        correlation = log_correlations(learned)
        save_csv(correlation, "correlation.csv")
        lines += ["## Pearson correlation of triples' AVEbsld between logs", "",
                  _markdown(correlation.round(3)), ""]
    written += _plots(learned, baselines, logs, out_dir)
    lines += [f"![{path.stem}]({path.name})" for path in written if path.suffix == ".png"]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [report, *written]


def _count(number: int, noun: str) -> str:
    """ "1 log", "3 logs", "1,200 runs". """
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _fmt(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.2f}"


def _markdown(frame: pd.DataFrame) -> str:
    """A GitHub table without the optional `tabulate` dependency."""
    header = ["", *map(str, frame.columns)]
    rows = [[str(index), *(_cell(value) for value in row)] for index, row in frame.iterrows()]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if np.isnan(value) else f"{value:.4g}"
    return str(value)


MAX_NAMED_POINTS = 8  # triples_per_log.png names every point up to this many, else the extremes


def _short_label(label: str) -> str:
    """A learned triple's label without its learning constants (the table has them):
    "learned E-Loss (...) + incremental + easy-sjbf (eta=..., ...)" -> "E-Loss + incremental"."""
    text = label.removeprefix("learned ")
    loss, _, rest = text.partition(" + ")
    loss = loss.split(" (")[0]
    if loss.startswith("over="):  # over=linear,under=square,weight=constant -> linear/square/constant
        loss = "/".join(part.partition("=")[2] for part in loss.split(","))
    correction = rest.split(" + ")[0] if rest else ""
    return f"{loss} + {correction}" if correction else loss


def _baseline_values(baselines: pd.DataFrame, log: str) -> list[float]:
    """The baselines' AVEbsld on `log` (the horizontal lines of triples_per_log.png)."""
    if log not in baselines.columns:
        return []
    return [float(value) for value in baselines[log].dropna()]


def _plots(learned: pd.DataFrame, baselines: pd.DataFrame, logs: list[str], out_dir: Path) -> list[Path]:
    from hpcpredict.headless_plots import pyplot

    plt = pyplot()

    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    paths = []
    present = [log for log in logs if log in learned.columns]
    if present:
        fig, axes = plt.subplots(1, len(present), figsize=(5.5 * len(present), 4.5), squeeze=False)
        for ax, log in zip(axes[0], present):
            ranked = learned[log].dropna().sort_values()
            values = ranked.to_numpy()
            ranks = np.arange(1, len(values) + 1)
            ax.plot(ranks, values, marker="o", markersize=4, linestyle="none", label="learned triples")
            # Name the points: all of them when few, else the best and the worst.
            named = range(len(values)) if len(values) <= MAX_NAMED_POINTS else (0, len(values) - 1)
            for index in named:
                ax.annotate(_short_label(str(ranked.index[index])), (ranks[index], values[index]),
                            textcoords="offset points", xytext=(6, -3), fontsize=7)
            for label, style in (("EASY", "--"), ("EASY++", ":"), ("clairvoyant EASY-SJBF", "-.")):
                if label in baselines.index and log in baselines.columns:
                    ax.axhline(baselines.loc[label, log], linestyle=style, color="grey",
                               label=f"{label} ({baselines.loc[label, log]:.1f})")
            ax.set_yscale("log")
            # Plain numbers on the log axis ("80", not "8x10^1"), at 1, 2 and 5 of each decade.
            # (lists: a campaign with no baseline on this log gives max() one value, not an iterable)
            shown = [*values, *_baseline_values(baselines, log)]
            decades = np.log10(max(shown) / max(min(shown), 1e-9))
            subs = np.arange(1.0, 10.0) if decades < 1 else (1.0, 2.0, 5.0) if decades < 3 else (1.0,)
            ax.yaxis.set_major_locator(LogLocator(subs=subs))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlim(0.5, len(values) + max(1.5, 0.6 * len(values)))  # room for the names
            ax.set_title(log)
            ax.set_xlabel("learned triples, ranked by AVEbsld (1 = best)")
            ax.set_ylabel("AVEbsld (log)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=2, frameon=False)
        fig.tight_layout()
        path = out_dir / "triples_per_log.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    complete = learned.dropna()
    if len(present) >= 2 and not complete.empty:
        pairs = [(a, b) for i, a in enumerate(present) for b in present[i + 1:]]
        fig, axes = plt.subplots(1, len(pairs), figsize=(4.5 * len(pairs), 4), squeeze=False)
        for ax, (a, b) in zip(axes[0], pairs):
            ax.scatter(complete[a], complete[b], s=10)
            r = complete[a].corr(complete[b])
            ax.set_xlabel(f"{a} AVEbsld")
            ax.set_ylabel(f"{b} AVEbsld")
            ax.set_title(f"Pearson r = {r:.2f}")
            ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = out_dir / "triples_between_logs.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
