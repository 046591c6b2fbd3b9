"""What the browser tests share: Debian's Chromium driven by Playwright, the
dashboard served by uvicorn on loopback, and the screenshots they take (into the
test's temporary directory, and into docs/screenshots/ when DENPYO_SCREENSHOTS is
set)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from conftest import free_port
from waiting import QUIET, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on loopback, in a thread: its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the dashboard's server", alive=thread.is_alive, every=0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def patient(context: Any) -> Any:
    """A browser context whose waits, and every `expect`, allow `QUIET` seconds
    (Playwright's own: 30 s and 5 s), so that a busy machine does not fail them; a
    wait whose condition holds ends at once."""
    from playwright.sync_api import expect

    context.set_default_timeout(QUIET * 1000)
    expect.set_options(timeout=QUIET * 1000)
    return context


class Shots:
    """Screenshots of whole pages, by name."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "screenshots"
        self.folder.mkdir(exist_ok=True)
        self.keep = bool(os.environ.get("DENPYO_SCREENSHOTS"))

    def take(self, page: Any, name: str) -> None:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if self.keep:
            DOCS.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, DOCS / path.name)
