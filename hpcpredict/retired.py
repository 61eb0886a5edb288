"""Settings that were measured, dropped, and taken out of the code (docs/results.md, "Retired
options"), so that a file written before still reads, or says plainly why it cannot.

A campaign file or a daemon.toml may still name one: at its old default it asked for nothing
(the key is dropped with a warning); at any other value it asked for behaviour this code no
longer has, and reading on would silently run something else, so it is an error that names the
git tag where the option still runs (`experiments-2026-11`).
"""

from __future__ import annotations

from collections.abc import MutableMapping

RETIRED_AT_TAG = "experiments-2026-11"

# key -> (its old default: asking for nothing, what it was)
RETIRED_SETTINGS: dict[str, tuple[object, str]] = {
    "per_user_experts": (False, "per-user expert choice"),
    "guard_scope": ("machine", "the guard's \"head\" scope"),
    "guard_recent_multiple": (1.0, "the guard's \"recent\" rule"),
    "guard_estimate_multiple": (None, "the guard's estimate stage on a multiple of the prediction"),
    "guard_evidence_s": (None, "the guard's evidence option"),
    "guard_evidence_cap_s": (None, "the guard's evidence option"),
    "aged_first_s": (None, "aged-first backfilling"),
}
RETIRED_GUARD_RULES = {"recent": "the guard's \"recent\" rule"}


class RetiredSettingError(ValueError):
    """A setting asks for an option that was retired."""


def retired_message(what: str) -> str:
    return (f"{what} was measured and retired (docs/results.md, \"Retired options\"); it still "
            f"runs at the git tag {RETIRED_AT_TAG}")


def drop_retired(settings: MutableMapping[str, object], where: str) -> list[str]:
    """Take the retired keys out of `settings` (in place). Returns one warning per key dropped
    at its old default; raises RetiredSettingError for a key set to anything else, and for a
    retired guard rule."""
    warnings = []
    for key in [key for key in settings if key in RETIRED_SETTINGS]:
        default, what = RETIRED_SETTINGS[key]
        value = settings.pop(key)
        values = value if isinstance(value, list) else [value]  # (a campaign's axis is a list)
        if any(item != default for item in values):
            raise RetiredSettingError(f"{where}: {key} = {value!r}: {retired_message(what)}")
        warnings.append(f"{where}: {key} is ignored: {retired_message(what)}")
    rule = settings.get("guard_rule")
    if isinstance(rule, str) and rule in RETIRED_GUARD_RULES:
        raise RetiredSettingError(f"{where}: guard_rule = {rule!r}: "
                                  f"{retired_message(RETIRED_GUARD_RULES[rule])}")
    return warnings
