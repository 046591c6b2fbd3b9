"""What the pages show, prepared in Python: payloads, ages, the chart.

Nothing here writes HTML by hand except the chart's SVG, whose every value is a
number the code computed; text from the ledger goes through Jinja's escaping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup

from denpyo.domain.channel_state import ChannelState, Mode
from denpyo.domain.settings import DEFAULT_POLL_INTERVAL


def pretty(value: Any) -> str:
    """A payload as the row's page shows it; one that is no JSON value (a placeholder
    for a payload that cannot be read) as its text."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def age(seconds: float | None) -> str:
    """A duration for people: 42s, 7m, 3h 5m, 2d 4h."""
    if seconds is None:
        return "—"
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def num(value: int) -> str:
    """A count as people read it: 10,000."""
    return f"{value:,}"


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "—"


SERIES = (
    ("sent", ("sent",), "series-sent"),
    ("failed or rejected", ("failed", "rejected"), "series-failed"),
)
WIDTH, HEIGHT, TOP, BOTTOM = 1440, 180, 12, 22


def chart(rows: Iterable[tuple[datetime, str, int]], now: datetime, hours: int = 24) -> Markup:
    """Calls sent, and failures, per minute over the last `hours`, as an SVG of two
    lines (one point per minute; the x axis counts hours back from the database's
    now). Built from numbers only."""
    minutes = hours * 60
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    per: dict[str, list[int]] = {name: [0] * minutes for name, _, _ in SERIES}
    for minute, outcome, n in rows:
        slot = int((minute - start).total_seconds() // 60)
        if 0 <= slot < minutes:
            for name, outcomes, _ in SERIES:
                if outcome in outcomes:
                    per[name][slot] += n
    peak = max([1, *(max(values) for values in per.values())])
    plot = HEIGHT - TOP - BOTTOM
    step = WIDTH / max(minutes - 1, 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        f'role="img" aria-label="calls sent and failed per minute, last {hours} hours">'
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot * (1 - fraction)
        parts.append(f'<line class="grid" x1="0" x2="{WIDTH}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="axis" x="4" y="{y - 3:.1f}">{round(peak * fraction)}/min</text>'
        )
    for back in range(hours, -1, -6):
        x = WIDTH - back * 60 * step
        label = "now" if back == 0 else f"-{back}h"
        anchor = "end" if back == 0 else ("start" if back == hours else "middle")
        parts.append(
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}">{label}</text>'
        )
    for name, _, css in SERIES:
        points = " ".join(
            f"{i * step:.1f},{TOP + plot * (1 - v / peak):.1f}" for i, v in enumerate(per[name])
        )
        parts.append(f'<polyline class="{css}" points="{points}"><title>{name}</title></polyline>')
    parts.append("</svg>")
    return Markup("".join(parts))


def totals(rows: Sequence[tuple[datetime, str, int]]) -> dict[str, int]:
    found: dict[str, int] = {}
    for _, outcome, n in rows:
        found[outcome] = found.get(outcome, 0) + n
    return found


POLL = f"within one poll interval ({DEFAULT_POLL_INTERVAL:g} s by default)"
MEANING = {
    Mode.ACTIVE: "Workers start its calls as they fall due.",
    Mode.PAUSED: "A person paused it: no worker starts its calls until someone resumes it. "
    "The application still records rows, which wait.",
    Mode.THROTTLED: "The provider asked the whole channel to wait (a 429 or 503 with "
    "Retry-After): no worker starts its calls until then.",
    Mode.DOWN: "The provider failed call after call: one probe call at a time, at a growing "
    "interval, until one succeeds. No row spends an attempt meanwhile.",
}
"""What each mode means for the channel's calls, as the channel's page says it."""
SWITCH = {
    "pause": f"Workers stop starting its calls {POLL}; calls already sent finish and settle.",
    "resume": f"Workers start its calls again {POLL}.",
}
"""What the channel's one action does, said beside its button."""
CHANNEL_DONE = {
    "paused": ("ok", f"Paused: workers stop starting its calls {POLL}."),
    "resumed": ("ok", f"Resumed: workers start its calls again {POLL}."),
    "already-paused": ("note", "It was paused already: nothing was changed."),
    "not-paused": ("note", "It was not paused: nothing was changed."),
}
"""What a channel's redirect may announce (`?done=CODE`): fixed texts only, never one
the link carries."""


@dataclass(frozen=True, slots=True)
class ChannelRow:
    """A channel as the overview and its page show it: its mode, since when (or until
    when), by whom and why, and the one action a person may take (pause a channel
    that is not paused, resume one that is)."""

    name: str
    mode: str
    since: str
    by: str
    why: str
    action: str
    meaning: str
    does: str

    @property
    def stopped(self) -> bool:
        return self.mode != Mode.ACTIVE.value


def channel_row(name: str, state: ChannelState | None) -> ChannelRow:
    mode = Mode.ACTIVE if state is None else state.mode
    since = by = why = ""
    if state is not None and mode is Mode.PAUSED:
        since = _moment(state.paused_at, state.now)
        by, why = state.paused_by or "", state.paused_note or ""
        if state.down_since is not None:
            why += f" (the provider is down too, since {_moment(state.down_since, state.now)})"
    elif state is not None and mode is Mode.THROTTLED:
        since = f"until {_moment(state.throttled_until, state.now)}"
        by, why = "the provider", state.throttled_note or ""
    elif state is not None and mode is Mode.DOWN:
        since = _moment(state.down_since, state.now)
        by, why = "the provider", state.down_note or "calls failed in a row"
        if state.probe_at is not None and state.probe_at > state.now:
            why += f"; next probe in {age((state.probe_at - state.now).total_seconds())}"
    action = "resume" if mode is Mode.PAUSED else "pause"
    return ChannelRow(name, mode.value, since, by, why, action, MEANING[mode], SWITCH[action])


def channel_rows(states: Mapping[str, ChannelState | None]) -> list[ChannelRow]:
    """Every channel, those that start no call first (each group by name)."""
    rows = [channel_row(name, state) for name, state in sorted(states.items())]
    return sorted(rows, key=lambda row: not row.stopped)


def _moment(at: datetime | None, now: datetime) -> str:
    """`at` in UTC, and how long ago (or how far ahead) by the database clock."""
    if at is None:
        return "—"
    seconds = (now - at).total_seconds()
    relative = f"{age(seconds)} ago" if seconds >= 0 else f"in {age(-seconds)}"
    return f"{when(at)} UTC ({relative})"
