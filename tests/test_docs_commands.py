"""Every `hpcpredict` command a reader can paste from the documentation parses with today's
options: the code blocks of README.md, docs/ and slurm-plugin/, and the deploy/ files (whose
commands stand in comments and in the unit's ExecStart). The commands the prose names in
backticks are held to their option names and choices (prose may leave out an argument).

`test_cli_help.py` checks the examples of each command's --help; these are the other place a
renamed option or a removed choice would leave a sysadmin with a command that no longer runs.
Each command is parsed by click from the repository's root, without running it. A file that does
not exist here (a site's log, ../shared/swf's) is no error: the names and values around it are
what is checked. Lines with a placeholder (`...`, `<...>`, `[...]`, `a|b`) are skipped.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import click
import pytest

from hpcpredict.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMANDS = main.all_commands()
# A command's name after `hpcpredict` (or a path ending in it): the lines worth reading.
_NAMED = re.compile(r"(?:^|[\s/;&|(])hpcpredict\s+(?:" + "|".join(map(re.escape, COMMANDS)) + r")(?![\w-])")
# The descriptor number of a redirection (2>&1), which the shell reads as part of the operator.
_FD_NUMBER = re.compile(r"(?<=\s)\d+(?=[<>])")
# A written alternative (`raw|robust`) marks a line as a pattern, not a command (before any
# comment); so do an elision or a placeholder among a command's words.
_ALTERNATIVE = re.compile(r"^[^#]*\S\|\S")
_PLACEHOLDER_WORD = re.compile(r"\.\.\.|^<|^\[")
_FENCE = "```"


def documented_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines of `path` that hold commands to paste: a Markdown file's
    fenced code blocks, or every line of another file (comment marks stripped); backslash
    continuations joined onto the first line's number."""
    lines = path.read_text(encoding="utf-8").splitlines()
    markdown = path.suffix == ".md"
    inside = not markdown
    kept: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        if markdown and line.strip().startswith(_FENCE):
            inside = not inside
            continue
        if not inside or (markdown and line.lstrip().startswith("#")):
            continue  # prose, or a shell comment in a code block (its commands may be sketches)
        text = line if markdown else line.lstrip().lstrip("#")
        start, joined = pending if pending is not None else (number, "")
        joined += text
        if joined.rstrip().endswith("\\"):
            pending = (start, joined.rstrip()[:-1] + " ")
            continue
        pending = None
        kept.append((start, joined))
    return kept


def shell_commands(text: str) -> list[list[str]] | None:
    """The `hpcpredict` commands in a shell line, each as its words after `hpcpredict`:
    `hpcpredict NAME` (or a path ending in it) as a shell word, up to the next shell operator
    (`;`, `&&`, `|`, `)`, a redirection) or comment, quotes as the shell reads them. None when the
    shell could not read the line (an unclosed quote)."""
    lexer = shlex.shlex(_FD_NUMBER.sub("", text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    commands = []
    for start, word in enumerate(words[:-1]):
        if (word == "hpcpredict" or word.endswith("/hpcpredict")) and words[start + 1] in COMMANDS:
            commands.append(list(itertools.takewhile(
                lambda token: not (token and all(c in lexer.punctuation_chars for c in token)),
                words[start + 1:])))
    return commands


def documented_commands(path: Path) -> list[tuple[int, list[str] | None]]:
    """The `hpcpredict` commands in `path`'s lines to paste (`documented_lines`, `shell_commands`),
    each as (line number, words after `hpcpredict`); a line the shell could not read is kept as
    a problem, its words None."""
    found: list[tuple[int, list[str] | None]] = []
    for number, text in documented_lines(path):
        if not _NAMED.search(text) or _ALTERNATIVE.search(text):
            continue
        commands = shell_commands(text)
        if commands is None:
            found.append((number, None))
            continue
        found.extend((number, command) for command in commands
                     if not any(_PLACEHOLDER_WORD.search(word) for word in command))
    return found


def documentation_files() -> list[Path]:
    files = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")),
             *sorted((REPO_ROOT / "slurm-plugin").glob("*.md")),
             *sorted(path for path in (REPO_ROOT / "deploy").iterdir() if path.is_file())]
    return [path for path in files if path.is_file()]


def refusal(words: list[str]) -> click.ClickException | None:
    """What click raises when parsing `hpcpredict WORDS` (without running it), or None when it
    parses; a file that does not exist here (a site's log) is no refusal."""
    name, *args = words
    try:
        with COMMANDS[name].make_context(f"hpcpredict {name}", args):
            return None
    except click.exceptions.Exit:  # --help, --version
        return None
    except click.UsageError as error:
        missing_file = (isinstance(error, click.BadParameter) and not isinstance(error, click.MissingParameter)
                        and "does not exist" in error.format_message())
        return None if missing_file else error


def parse_problem(words: list[str] | None) -> str | None:
    """Why click refuses `hpcpredict WORDS`, or None when it parses (a missing file aside)."""
    if words is None:
        return "the shell cannot read this line (an unclosed quote?)"
    error = refusal(words)
    return None if error is None else error.format_message()


# A command named in the prose: `hpcpredict NAME ...` in backticks (a span may wrap a line).
_SPAN = re.compile(r"`(hpcpredict\s+[^`]+)`")
_UPPERCASE_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_0-9]*$")  # LOG, ID, UID, N


def mentioned_commands(path: Path) -> list[tuple[int, list[str]]]:
    """The `hpcpredict` commands in a Markdown file's prose (inline code, not fenced blocks), as
    (line number, words after `hpcpredict`); those with a placeholder are left out."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", lambda block: "\n" * block.group(0).count("\n"), text, flags=re.S)
    found = []
    for match in _SPAN.finditer(prose):
        span = " ".join(match.group(1).split())
        if _ALTERNATIVE.search(span):
            continue
        number = prose.count("\n", 0, match.start()) + 1
        found.extend((number, command) for command in shell_commands(span) or []
                     if not any(_PLACEHOLDER_WORD.search(word) or _UPPERCASE_PLACEHOLDER.match(word)
                                for word in command))
    return found


def naming_problem(words: list[str]) -> str | None:
    """Why click refuses an option name or a choice in `hpcpredict WORDS`; prose may leave out an
    argument or an option's value, so those are no problem here."""
    error = refusal(words)
    wrong_name = isinstance(error, click.NoSuchOption) or (
        isinstance(error, click.BadParameter) and not isinstance(error, click.MissingParameter))
    return error.format_message() if wrong_name else None


@pytest.mark.parametrize("path", [path for path in documentation_files() if path.suffix == ".md"],
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_command_named_in_the_prose_uses_todays_options(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    problems = [f"{path.relative_to(REPO_ROOT)}:{number}: `hpcpredict {shlex.join(words)}`: {problem}"
                for number, words in mentioned_commands(path)
                if (problem := naming_problem(words)) is not None]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", documentation_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_documented_command_parses_with_todays_options(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO_ROOT)  # the commands' files are the repository's
    problems = [f"{path.relative_to(REPO_ROOT)}:{number}: hpcpredict {shlex.join(words or [])}: {problem}"
                for number, words in documented_commands(path)
                if (problem := parse_problem(words)) is not None]
    assert not problems, "\n".join(problems)


def test_the_documentation_has_commands_to_check() -> None:
    """The check above sees the documents' commands (a pattern that found none would pass)."""
    counts = {str(path.relative_to(REPO_ROOT)): len(documented_commands(path)) for path in documentation_files()}
    assert sum(counts.values()) >= 100, counts
    assert counts["README.md"] >= 10 and counts["deploy/hpcpredict.service"] == 1, counts
    named = sum(len(mentioned_commands(path)) for path in documentation_files() if path.suffix == ".md")
    assert named >= 50, named


def test_a_stale_command_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A renamed option, an unknown choice, a missing argument and a continued line are found and
    refused; a site's own log that does not exist here is not."""
    monkeypatch.chdir(REPO_ROOT)
    page = tmp_path / "page.md"
    page.write_text("Prose mentioning `hpcpredict simulate --lambada` is not read.\n"
                    "```\n"
                    "$ hpcpredict simulate swf/KTH-SP2-sample.swf --lambada 0\n"
                    "sudo -u slurm /opt/venv/bin/hpcpredict simulate my-site.swf \\\n"
                    "    --scheduler fifo\n"
                    "hpcpredict tune --replicas 3   # no log\n"
                    "hpcpredict simulate /var/log/site.swf --replicas 3 > out.txt\n"
                    "hpcpredict simulate LOG --correction incremental|survival\n"
                    "# hpcpredict simulate a shell comment --lambada\n"
                    "(hpcpredict campaign-report sim/smoke.toml --pair-with \"EASY (24 h)\" | head) 2>&1\n"
                    "```\n", encoding="utf-8")
    commands = documented_commands(page)
    assert [number for number, _ in commands] == [3, 4, 6, 7, 10], commands
    problems = [parse_problem(words) for _, words in commands]
    assert "No such option" in problems[0] and "--lambada" in problems[0]
    assert "fifo" in problems[1]
    assert "Missing argument" in problems[2]
    assert problems[3] is None
    assert commands[4][1][-2:] == ["--pair-with", "EASY (24 h)"] and problems[4] is None
    unit = tmp_path / "unit.service"
    unit.write_text("ExecStart=/opt/venv/bin/hpcpredict serve --confg /etc/hpcpredict/daemon.toml\n")
    [(_, words)] = documented_commands(unit)
    assert "--confg" in parse_problem(words)


def test_a_stale_option_named_in_the_prose_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In prose, a wrong option name or choice is refused, even across a line break; a left-out
    argument or value, a placeholder and a code block are not read as problems."""
    monkeypatch.chdir(REPO_ROOT)
    page = tmp_path / "page.md"
    page.write_text("Run `hpcpredict simulate --starvation-gaurd 24h` or `hpcpredict tune\n"
                    "--scheduler fifo`; `hpcpredict tune --replicas` and `hpcpredict errors --user UID`\n"
                    "and `hpcpredict simulate --feature-scaling robust | less` are fine.\n"
                    "```\nhpcpredict simulate --not-prose\n```\n", encoding="utf-8")
    commands = mentioned_commands(page)
    assert [number for number, _ in commands] == [1, 1, 2, 3], commands
    problems = [naming_problem(words) for _, words in commands]
    assert "--starvation-gaurd" in problems[0] and "fifo" in problems[1]
    assert problems[2:] == [None, None]
