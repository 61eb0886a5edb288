"""Every command's --help ends with Examples a reader can paste: real commands on the bundled
files (swf/, sim/, deploy/, docs/slurm-replay/), written with today's option names.

Each example is parsed by the command it names, from the repository's root, as click would
parse it (types, choices, files that must exist): an option renamed or removed, or a file moved,
fails here. A deprecated name (a hidden option) in an example fails too.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest
from click.core import ParameterSource
from click.testing import CliRunner

from hpcpredict.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMANDS = sorted(main.all_commands())


def examples(command: click.Command) -> list[list[str]]:
    """The example commands of `command`'s help text, each split as a shell would (continuation
    lines joined, comments dropped), without the leading ``hpcpredict``."""
    help_text = command.help or ""
    assert "Examples" in help_text, f"{command.name}: no Examples section in --help"
    section = help_text[help_text.index("Examples"):].splitlines()[1:]
    lines: list[str] = []
    pending = ""
    for line in section:
        text = line.strip()
        if not text:
            break
        pending += text
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        lines.append(pending)
        pending = ""
    parsed = [shlex.split(line, comments=True) for line in lines]
    assert parsed and all(words[0] == "hpcpredict" for words in parsed), (command.name, lines)
    return [words[1:] for words in parsed]


def parse(words: list[str]) -> click.Context:
    """Parse one example as `hpcpredict` would, without running it."""
    name, *args = words
    command = main.all_commands()[name]
    return command.make_context(f"hpcpredict {name}", args)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_commands_help_shows_examples(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "\nExamples" in result.output or "\n  Examples" in result.output
    assert f"hpcpredict {name}" in result.output.split("Examples", 1)[1]


@pytest.mark.parametrize("name", [None, *COMMANDS])
def test_every_example_parses_with_todays_option_names(
    name: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO_ROOT)  # the examples' files are the repository's
    command = main if name is None else main.all_commands()[name]
    for words in examples(command):
        if name is not None:
            assert words[0] == name, f"{name}'s help shows an example of {words[0]}"
        with parse(words) as context:
            hidden = [param.name for param in context.command.params
                      if getattr(param, "hidden", False)
                      and context.get_parameter_source(param.name) is ParameterSource.COMMANDLINE]
            assert not hidden, f"{' '.join(words)}: a deprecated option name"


def test_an_example_with_a_mistyped_option_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above does refuse a bad example (the parse is not silently lenient)."""
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(click.UsageError):
        parse(["simulate", "swf/KTH-SP2-sample.swf", "--lambada", "0"])
    with pytest.raises(click.BadParameter):
        parse(["simulate", "swf/no-such-log.swf"])
    with parse(["simulate", "swf/KTH-SP2-sample.swf", "--lambda", "0"]) as context:
        assert context.get_parameter_source("deprecated_lambda") is ParameterSource.COMMANDLINE
