"""Check where a command will write *before* it does the long work.

A simulation or an evaluation can run for minutes; finding only at the end that the output
folder is missing or read-only loses all of it and prints a traceback. The commands call these
checks first and turn `OutputPathError` into a one-line error. Writability is probed by creating
a temporary file, not with `os.access`: root passes `os.access` everywhere, yet /proc or a
read-only mount still refuse the write.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class OutputPathError(ValueError):
    """An output path the command could not write to, with the reason in words."""


def _probe(folder: Path, what: str) -> None:
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise OutputPathError(f"{what}: cannot write in {folder} ({error.strerror or error})") from None


def check_output_dir(folder: Path, *, what: str) -> None:
    """`folder` exists (created with its parents if needed) and accepts new files."""
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"{what}: {folder} exists and is not a folder")
    blocking = _file_in_the_way(folder.parent)
    if blocking is not None:
        raise OutputPathError(f"{what}: {folder}: {blocking} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputPathError(f"{what}: cannot create {folder} ({error.strerror or error})") from None
    _probe(folder, what)


def check_output_file(path: Path, *, what: str) -> None:
    """`path` can be written: its folder exists (never created: a typo should not make
    folders) and accepts new files, and `path` is not a folder."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        blocking = _file_in_the_way(folder)
        if blocking is not None:
            raise OutputPathError(f"{what}: {path}: {blocking} is a file, not a folder; "
                                  f"give a path inside a folder")
        raise OutputPathError(f"{what}: {path}: folder {folder} does not exist")
    if path.is_dir():
        raise OutputPathError(f"{what}: {path} is a folder")
    _probe(folder, what)


def _file_in_the_way(folder: Path) -> Path | None:
    """The nearest of `folder` and its parents that exists as something other than a folder
    (``x.swf/out.swf`` where x.swf is a file): "does not exist" would send the user looking for
    a folder that is not missing."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None
