"""The 20 features and the model's terms in words, for people who read explanations, not code.

`hpcpredict errors --job ID` names a term of the degree-2 model by its features' code names
(``break_time_s^2``, ``procs_mean_submitted x break_time_s``): exact, and what the JSON carries.
A sysadmin asked "why did my job get 4 minutes?" needs them as what they measure: "(time since
the user's last job ended)²". The words live here, beside nothing but the names they explain
(`features.FEATURE_NAMES`), so a renamed or added feature fails
tests/test_report_page.py::test_every_feature_and_every_term_has_words instead of leaving the page
with a code name.
"""

from __future__ import annotations

from hpcpredict.learn.features import FEATURE_NAMES

# name -> (short words for a term, the glossary's longer sentence). The numbers are docs/method.md
# §2's; "the user's history" is their ended jobs, "running" their jobs started and not ended.
FEATURE_WORDS: dict[str, tuple[str, str]] = {
    "requested_s": ("the request", "1. The time limit the user asked for (seconds)."),
    "last_run_s": ("the user's last runtime", "2. Runtime of the user's most recently ended job (0 before one ended)."),
    "second_last_run_s": ("the user's 2nd-last runtime", "3. Runtime of the job that ended before it."),
    "third_last_run_s": ("the user's 3rd-last runtime", "4. Runtime of the one before that."),
    "ave2_s": ("the mean of the last 2 runtimes", "5. AVE2: the mean of features 2 and 3 (the AVE2 predictor's answer)."),
    "ave3_s": ("the mean of the last 3 runtimes", "6. AVE3: the mean of features 2 to 4."),
    "mean_run_s": ("the user's mean runtime", "7. Mean runtime of all the user's ended jobs."),
    "procs": ("the job's processors", "8. Processors the job asks for."),
    "procs_mean_submitted": ("the user's mean processors", "9. Mean processors of the user's submitted jobs, this one included."),
    "procs_ratio": ("processors against the user's mean", "10. Feature 8 divided by feature 9 (1: a usual size for this user)."),
    "procs_mean_running": ("mean processors of the user's running jobs", "11. Mean processors of the user's jobs running at submission."),
    "n_running": ("the user's running jobs", "12. How many of the user's jobs run at submission."),
    "longest_elapsed_s": ("longest elapsed of the user's running jobs", "13. How long the user's longest-running job has run so far."),
    "sum_elapsed_s": ("total elapsed of the user's running jobs", "14. Sum of how long each of the user's running jobs has run so far."),
    "procs_held": ("processors the user holds", "15. Processors of the user's running jobs, in all."),
    "break_time_s": ("time since the user's last job ended", "16. Break time: seconds from the user's last job's end to this submission (log(1 + s) with --feature-scaling robust)."),
    "day_cos": ("time of day (cos)", "17. cos(2 pi t / 1 day) of the submission's local time: +1 at midnight, -1 at noon."),
    "day_sin": ("time of day (sin)", "18. sin(2 pi t / 1 day): +1 at 06:00, -1 at 18:00."),
    "week_cos": ("time of week (cos)", "19. cos(2 pi t / 1 week), the week counted from Thursday 00:00 as Unix time is."),
    "week_sin": ("time of week (sin)", "20. sin(2 pi t / 1 week)."),
}


def term_in_words(term: str) -> str:
    """A term's name (`polynomial.term_names`) in words: "bias", "the request",
    "(the request)²", "the request × the user's last runtime"."""
    if term == "bias":
        return "a constant (the model's bias)"
    if term.endswith("^2"):
        return f"({FEATURE_WORDS[term[:-2]][0]})²"
    if " x " in term:
        left, right = term.split(" x ")
        return f"{FEATURE_WORDS[left][0]} × {FEATURE_WORDS[right][0]}"
    return FEATURE_WORDS[term][0]


def glossary() -> list[tuple[str, str, str]]:
    """(code name, short words, sentence) for the 20 features, in the model's order."""
    return [(name, *FEATURE_WORDS[name]) for name in FEATURE_NAMES]
