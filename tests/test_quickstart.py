"""docs/daemon.md's quick start, followed word for word: the commands are read from the page itself
(so the page and the test cannot drift apart) and run as a user would, the state directory moved
with HPCPREDICT_STATE_DIR as the page says."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from testbed.daemon_thread import wait_until_answering

REPO_ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[list[str]]:
    page = (REPO_ROOT / "docs" / "daemon.md").read_text()
    section = page.split("## Quick start", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.strip()]


def command(words: list[str]) -> list[str]:
    """`hpcpredict ...` as installed beside this Python (pip install puts the script there)."""
    assert words[0] == "hpcpredict", words
    script = Path(sys.executable).with_name("hpcpredict")
    return [str(script), *words[1:]] if script.exists() else [sys.executable, "-m", "hpcpredict.cli", *words[1:]]


def test_the_daemon_quick_start_works_as_written(tmp_path: Path) -> None:
    commands = quick_start_commands()
    assert [words[:2] for words in commands] == [["hpcpredict", "train"], ["hpcpredict", "serve"],
                                                 ["hpcpredict", "errors"]]
    env = {**os.environ, "HPCPREDICT_STATE_DIR": str(tmp_path / "state"), "CI": "true"}
    shell_umask = 0o022  # as most shells set it: the commands must tighten it themselves
    trained = subprocess.run(command(commands[0]), cwd=REPO_ROOT, env=env, capture_output=True,
                             text=True, timeout=120, umask=shell_umask)
    assert trained.returncode == 0, trained.stderr
    assert "4,997 learning steps" in trained.stdout
    assert "warning" in trained.stderr  # the sample is from 1996: said plainly (docs/daemon.md)
    serve = subprocess.Popen(command(commands[1]), cwd=REPO_ROOT, env=env, umask=shell_umask,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until_answering(str(tmp_path / "state" / "hpcpredict.sock"), serve, lambda: "")
        deadline = time.monotonic() + 20
        while True:  # the page promises http://127.0.0.1:8765
            try:
                with urllib.request.urlopen("http://127.0.0.1:8765/health", timeout=2) as answer:
                    health = json.load(answer)
                break
            except OSError:
                assert time.monotonic() < deadline, "no HTTP API on 127.0.0.1:8765"
                time.sleep(0.2)
        # the 1996 sample is stale: the daemon answers, with the users' requests, and says why
        assert health["status"] == "not_ready" and health["stale_history"] is True
        assert health["ready"] is False and health["reasons"] == ["stale"]
        # every user's jobs are in there: the state folder and the database files are private
        state = tmp_path / "state"
        assert state.stat().st_mode & 0o777 == 0o700
        database_files = [path for path in state.iterdir() if path.name.startswith("hpcpredict.db")]
        assert any(path.name.endswith("-wal") for path in database_files)  # WAL: served live
        for path in database_files:
            assert path.stat().st_mode & 0o777 == 0o600, path
        as_written = subprocess.run(command(commands[2]), cwd=REPO_ROOT, env=env,
                                    capture_output=True, text=True, timeout=60)
        assert as_written.returncode == 0, as_written.stderr
        assert "no judged job" not in as_written.stdout and "4,997" in as_written.stdout
        errors = subprocess.run([*command(commands[2]), "--format", "json"], cwd=REPO_ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert errors.returncode == 0, errors.stderr
        users = {row["user_id"] for row in json.loads(errors.stdout)}
        assert len(users - {"all"}) == 95  # every user of the sample, from the training replay
    finally:
        serve.terminate()
        serve.wait(30)
