"""Headless Chromium for the sysadmin page's tests and screenshots (issue 53).

Debian's chromium (testbed/system_packages.py) driven by playwright's Python package with that
system browser: playwright's own browser download is never used (`executable_path`). The flags
are the ones this machine needs: no sandbox as root, and none of Chromium's background
connections, which the closed network refuses by the dozen at each start.

``python -m testbed.browser shots`` writes docs/img/'s screenshots of the page (static, at 1280 px
and 390 px, and live), from a store trained on the bundled sample.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
WIDE, NARROW = 1280, 390  # a desktop, and a phone held upright


def chromium_path() -> str | None:
    """The system Chromium, or None (the browser tests then skip, or fail in CI)."""
    found = os.environ.get("HPCPREDICT_CHROMIUM") or (CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"))
    return found or None


@dataclass
class Loaded:
    """A page as a browser loaded it, and what went wrong while it did."""

    page: Any  # playwright's Page
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def overflow_px(self) -> int:
        """How far the page runs past the right edge of the window (0: it does not)."""
        return int(self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))

    def broken_images(self) -> list[str]:
        return self.page.evaluate(
            "Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
            ".map(i => i.src.slice(0, 80))")


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium (playwright's Browser)."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError("no Chromium: apt-get install chromium (testbed/system_packages.py)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@contextlib.contextmanager
def open_page(launched: Any, url: str, width: int, *, credentials: tuple[str, str] | None = None,
              height: int = 900) -> Iterator[Loaded]:
    """`url` loaded in a new window `width` px wide (with Basic `credentials`, as a browser asks
    for them); the console's errors and the failed requests are collected from the start."""
    context = launched.new_context(
        viewport={"width": width, "height": height},
        http_credentials=None if credentials is None else {"username": credentials[0], "password": credentials[1]})
    try:
        page = context.new_page()
        loaded = Loaded(page)
        page.on("console", lambda message: loaded.console_errors.append(message.text)
                if message.type == "error" else None)
        page.on("pageerror", lambda error: loaded.console_errors.append(str(error)))
        page.on("requestfailed", lambda request: loaded.failed_requests.append(request.url[:80]))
        page.goto(url, wait_until="load")
        yield loaded
    finally:
        context.close()


def _shots(out_dir: Path) -> None:
    """docs/img/'s screenshots: the static page at both widths (the first screen), the live one."""
    import tempfile

    from click.testing import CliRunner

    from hpcpredict.cli import main
    from hpcpredict.daemon.core.config import DaemonConfig
    from testbed.daemon_thread import Running, write_token_file

    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    with tempfile.TemporaryDirectory(prefix="hpshots") as folder:
        work = Path(folder)
        db = f"sqlite:///{work / 'hpcpredict.db'}"
        for command in (["train", str(sample), "--db", db], ["report", "--db", db, "--out", str(work / "page")]):
            done = CliRunner().invoke(main, command)
            if done.exit_code:
                raise SystemExit(done.output)
        out_dir.mkdir(parents=True, exist_ok=True)
        with browser() as launched:
            for width in (WIDE, NARROW):
                with open_page(launched, (work / "page" / "index.html").as_uri(), width) as loaded:
                    loaded.page.screenshot(path=str(out_dir / f"report-{width}.png"))
            config = DaemonConfig(db=db, socket=str(work / "d.sock"), http="127.0.0.1:0",
                                  http_token_file=write_token_file(work), spool=str(work / "jobcomp.spool"))
            running = Running(config)
            try:
                with open_page(launched, running.url + "/report", WIDE, credentials=("admin", running.token)) as loaded:
                    loaded.page.locator("#daemon").scroll_into_view_if_needed()
                    loaded.page.screenshot(path=str(out_dir / "report-live-1280.png"))
            finally:
                running.stop()
    for name in sorted(out_dir.glob("report-*.png")):
        print(name)


if __name__ == "__main__":
    if sys.argv[1:2] != ["shots"]:
        raise SystemExit("usage: python -m testbed.browser shots [DIR (default docs/img)]")
    _shots(Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent / "docs" / "img")
