"""What every command's output for people shares: the consoles, a colour per
status, times relative to the database clock ("3 min ago"), a row's status and
hold, JSON for scripts (`--json`). Each command's own tables live beside it
(status.py, rows.py, actions.py, audit.py, keeping.py...).

Every stored text (a key, an error, a note, a remote id) reaches rich as a `Text`,
which is never read as markup, after `visible` has escaped its control characters:
what a caller or a provider wrote is shown, never obeyed."""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from denpyo.domain.holders import actor_of, lease_left
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.domain.text import age, visible
from denpyo.engine.holders import holder_gone

STATUS_STYLE = {
    Status.REQUESTING: "cyan",
    Status.SYNCED: "green",
    Status.FAILED: "yellow",
    Status.REJECTED: "red",
}


def _width() -> int | None:
    """Piped with no COLUMNS, rich would squeeze every table into 80 columns; give
    it room instead, so that each line is as wide as what it shows."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return PIPED_WIDTH


PIPED_WIDTH = 1000
out = Console(highlight=False, soft_wrap=False, width=_width())
err = Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    """Plain JSON on stdout: no markup, no colour, one document."""
    click.echo(json_text(data, indent=2))


def json_text(data: Any, indent: int | None = None) -> str:
    """`data` as JSON, every control character written as an escape: `json` escapes
    those below a space itself, but leaves DEL and the C1 controls (U+0080 to
    U+009F, which some terminals obey) as they are. The same value either way. What
    is no JSON value (a placeholder for a payload that cannot be read) is its text."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, default=str)
    return _JSON_RAW_CONTROL.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


_JSON_RAW_CONTROL = re.compile(r"[\x7f-\x9f]")


def plain(text: str, style: str = "") -> Text:
    """A stored text for rich: control characters escaped, and no markup read in it
    (a remote id `[/]` must not raise, nor `[link=...]` make a link)."""
    return Text(visible(text), style=style)


def ago(when: datetime | None, now: datetime) -> str:
    """`when` relative to `now`: "just now", "42 s ago", "3 min ago", "in 2 h"."""
    if when is None:
        return "-"
    seconds = (now - when).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 1:
        return "just now"
    if seconds < 60:
        amount = f"{seconds:.0f} s"
    elif seconds < 3600:
        amount = f"{seconds / 60:.0f} min"
    elif seconds < 86400 * 2:
        amount = f"{seconds / 3600:.0f} h"
    else:
        amount = f"{seconds / 86400:.0f} days"
    return f"in {amount}" if future else f"{amount} ago"


def status_text(sub: Submission, *, gone: bool = False) -> Text:
    """The status, and what it is now: in doubt, in flight (held under a live lease:
    `held` instead when the holder is known to be gone), resolved."""
    text = Text(sub.status.value, style=STATUS_STYLE[sub.status])
    if sub.in_doubt:
        text.append(" in doubt", style="bold magenta")
    elif sub.in_flight:
        text.append(" held" if gone else " in flight", style="bold magenta" if gone else "dim")
    if sub.resolution:
        text.append(" resolved", style="dim")
    return text


def hold_text(sub: Submission, now: datetime, *, gone: bool, brief: bool = False) -> str | None:
    """Who holds a row under a live lease, and for how long by the database clock: "W,
    lease ends in N s" (what `show` writes after "held by"), with "holder gone" when
    its process is known to have exited (the row waits for its lease to end, then is
    in doubt and verified); `brief`, for a narrow column, the time left first. None
    when no live lease holds it."""
    left = lease_left(sub.locked_until, now)
    if sub.locked_by is None or left is None or left <= 0:
        return None
    holder = visible(actor_of(sub.locked_by))
    if brief:
        return f"{age(left)} left, " + (f"holder gone: {holder}" if gone else f"held by {holder}")
    return f"{holder}, lease ends in {age(left)}" + (" (holder gone)" if gone else "")


def unsettled_text(sub: Submission) -> str | None:
    """Why the tries of a `requesting` row in doubt leave out its last hold: its
    holder's lease ran out before a settle, so whether that call started is not
    known, and `attempts` counts only calls known to have started (counted when a
    verify finds it, or the row is sent again and settles). None for any other row."""
    if sub.status is not Status.REQUESTING or not sub.in_doubt:
        return None
    return f"attempt {sub.attempts + 1} never settled: not counted until verified"


class Holders:
    """Whether each holder is known to be gone, asked once per holder."""

    def __init__(self) -> None:
        self.known: dict[str, bool] = {}

    def gone(self, sub: Submission) -> bool:
        if sub.locked_by is None:
            return False
        actor = actor_of(sub.locked_by)
        if actor not in self.known:
            self.known[actor] = holder_gone(sub.locked_by)
        return self.known[actor]


def short(text: str | None, width: int | None = 60) -> str:
    """`text` on one line, cut to `width` characters (None: whole), for a column: its
    runs of white space (line breaks too) become one space, and any other control
    character is escaped."""
    if not text:
        return ""
    line = visible(" ".join(text.split()))
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def stamp(when: datetime | None) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else "-"


def show_requested(action_id: int, reason: str, as_json: bool) -> None:
    """An action a two-person rule kept for a second person: nothing was done."""
    if as_json:
        emit_json({"requested": action_id, "reason": reason})
        return
    out.print(
        plain(
            f"request #{action_id}: {reason}; nothing is done until another person runs: "
            f"denpyo approve {action_id} --note TEXT",
            style="yellow",
        )
    )
