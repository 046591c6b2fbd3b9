"""The code of the documentation pages, read from them, so that the tests run what a
reader copies. A block that a test picks by name is marked on its page by an HTML
comment just above it, which the site does not show: `<!-- recipe: payment -->`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCED = re.compile(r"(?:<!-- (\w+): ([\w-]+) -->\s*)?^```(\w*)\n(.*?)^```", re.DOTALL | re.M)


class Block(NamedTuple):
    marker: str  # "recipe" for `<!-- recipe: payment -->`; "" when unmarked
    name: str  # "payment"
    language: str  # "python", "sql", "sh"
    code: str


def blocks(page: str, marker: str | None = None) -> list[Block]:
    """The fenced code blocks of docs/`page`, in page order; with `marker`, only
    those marked `<!-- marker: name -->`."""
    found = [Block(m or "", n or "", lang, code) for m, n, lang, code in FENCED.findall(read(page))]
    return found if marker is None else [b for b in found if b.marker == marker]


def named(page: str, marker: str) -> dict[str, str]:
    """The code of each block marked `<!-- marker: name -->`, by name."""
    return {block.name: block.code for block in blocks(page, marker)}


def read(page: str) -> str:
    return (DOCS / page).read_text()


MARK = "@@@ command "


def commands(code: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The commands of a shell block, one a line (a line ending in a backslash goes
    on with the next), without the comments and the lines that start with `skip`."""
    found = []
    for line in code.replace("\\\n", " ").splitlines():
        command = line.split("  #")[0].strip()
        if command and not command.startswith(("#", *skip)):
            found.append(command)
    return found


def run_session(
    folder: Path,
    steps: list[str],
    *,
    env: dict[str, str | None] | None = None,
    end: str = "",
    timeout: float = 120,
) -> list[tuple[str, str]]:
    """Run `steps` in order in one bash in `folder`, as a reader pastes them; each
    step with what it printed (stdout and stderr). `python`, `python3`, `denpyo` and
    `uvicorn` are this interpreter's; `env` adds variables (None: unset). Nothing
    is added between the steps: a page that starts a server prints the command
    that waits for it. A step left in the background (`… &`) writes to
    background.log, so that its output does not mix with the next steps'. `end`
    runs after the last step, its output counted as the last step's. Whatever
    still runs at the end, or at `timeout`, is killed."""
    lines = []
    for n, step in enumerate(steps):
        lines += [f"echo '{MARK}{n}'", step]
        if step.endswith("&"):
            lines[-1] = f"{step[:-1].rstrip()} >>background.log 2>&1 &"
    lines.append(end)
    (folder / "session.sh").write_text("\n".join(lines) + "\n")
    merged = {**os.environ, **(env or {})}
    merged["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    proc = subprocess.Popen(
        ["bash", "session.sh"],
        cwd=folder,
        env={name: value for name, value in merged.items() if value is not None},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    parts = re.split(rf"\n?{MARK}(\d+)\n", out)
    assert len(parts) == 2 * len(steps) + 1, out
    return [(steps[int(n)], text) for n, text in zip(parts[1::2], parts[2::2], strict=True)]


def run_app_session(
    folder: Path,
    steps: list[str],
    *,
    ports: dict[str, int],
    database: str | None,
    export: str,
    env: dict[str, str | None],
    timeout: float = 180,
) -> dict[str, list[str]]:
    """A page's session that starts an app and a provider and stops them: with each
    page port of `ports` on the free one given, and `DATABASE_URL` exported first
    when `database` is given (the page's own `export` line, `export`, names a
    PostgreSQL URL). What each command printed, by command as the page prints it
    (a command run twice, twice). Fails unless the page stopped what it started."""
    if database is not None:
        assert export.startswith("export DATABASE_URL=postgresql://"), export
        steps = [f"export DATABASE_URL={database}", *steps]
    for page_port, port in ports.items():
        steps = [step.replace(page_port, str(port)) for step in steps]
    outputs = run_session(folder, steps, env=env, end='wait; echo "@@@ all ended"', timeout=timeout)
    assert "@@@ all ended" in outputs[-1][1], outputs[-1]
    said: dict[str, list[str]] = {}
    for step, text in outputs:
        for page_port, port in ports.items():
            step = step.replace(str(port), page_port)
        said.setdefault(step, []).append(text)
    return said


def table_row(output: str, label: str) -> dict[str, int]:
    """A row of a table `denpyo status` prints, by column name."""
    header = re.search(r"^┃(.*)┃$", output, re.M)
    row = re.search(rf"^│ {label} +│(.*)│$", output, re.M)
    assert header is not None and row is not None, output
    names = [cell.strip() for cell in header.group(1).split("┃")][1:]
    return dict(zip(names, (int(cell) for cell in row.group(1).split("│")), strict=True))


def summary(output: str, label: str) -> int:
    """A line of the summary `denpyo reconcile` prints."""
    found = re.search(rf"^│ {re.escape(label)} +│ +(\d+) │$", output, re.M)
    assert found is not None, output
    return int(found.group(1))
