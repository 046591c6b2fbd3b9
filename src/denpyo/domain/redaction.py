"""Redaction: the payload fields nobody but the channel sees, and the one rule that
hides them wherever a row is shown (the command line, the dashboard, alerts, logs).

A field is hidden by its name, at any depth, whatever its case and separators
(`cardNumber`, `card-number`, `CARD NUMBER` and `card.number` are all
`card_number`). A text shown about a row (its last error, its events' details, an
alert) has the row's hidden values replaced too: a provider's error that quotes
the card number it refused must not show it. The channel always gets the whole
payload; what is stored is never changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, overload

from denpyo.domain.alert import Alert
from denpyo.domain.forgetting import Scrubber
from denpyo.domain.submission import Event, Submission
from denpyo.errors import ConfigurationError, InvalidInput

REDACTED = "[redacted]"
"""What is shown in place of a hidden field, and of a hidden value in a text."""
DEFAULT_REDACT = (
    "password",
    "secret",
    "token",
    "api_key",
    "access_token",
    "refresh_token",
    "client_secret",
    "private_key",
    "authorization",
    "card_number",
    "cvv",
    "cvc",
    "iban",
)
"""Payload fields hidden by default: credentials and payment details."""
ENV_VARIABLE = "DENPYO_REDACT"
"""Comma-separated names that every ledger opened in this environment hides too."""
SHORTEST_SCRUBBED = 3
"""Hidden values shorter than this are not looked for in texts: `no` or `42` would
blot out words and numbers that have nothing to do with them."""

_SEPARATORS = re.compile(r"[\s_.\-]+")


def normalize(name: object) -> str:
    """A field name as the rule compares it: lower case, without `_`, `-`, `.` and
    spaces."""
    return _SEPARATORS.sub("", str(name).lower())


@dataclass(frozen=True, slots=True)
class Redaction:
    """Which payload fields are hidden (`names`, normalized), and how to hide them.

    `Redaction.default()` hides DEFAULT_REDACT; `Redaction.of(["address"])` hides
    those and more; `Redaction.only("card_number")` hides just those (for a team
    whose payloads use a default name for something that is not secret).
    """

    names: frozenset[str]

    # -- making one --------------------------------------------------------------------

    @classmethod
    def only(cls, *names: str) -> Redaction:
        """A rule hiding exactly these fields, and none of the defaults."""
        return cls(frozenset(_checked(names)))

    @classmethod
    def default(cls) -> Redaction:
        """The rule of a ledger given no names: DEFAULT_REDACT."""
        return cls.only(*DEFAULT_REDACT)

    @classmethod
    def of(cls, redact: Redaction | Iterable[str] = (), *, env: str | None = None) -> Redaction:
        """The rule a ledger works by: `redact` itself when it is a Redaction, else the
        defaults and these names; either way with the names of `env` (the text of
        $DENPYO_REDACT) added, so that an environment may hide more, never less."""
        if isinstance(redact, Redaction):
            chosen = redact
        elif isinstance(redact, str):
            raise InvalidInput(
                f"redact is a list of field names, not the string {redact!r} (write [{redact!r}])"
            )
        else:
            chosen = cls.default().adding(redact)
        try:
            return chosen.adding(parse_names(env or ""))
        except InvalidInput as exc:
            raise ConfigurationError(f"{ENV_VARIABLE}: {exc}") from None

    def adding(self, names: Iterable[str]) -> Redaction:
        """This rule, hiding these fields too."""
        more = frozenset(_checked(names))
        return self if more <= self.names else Redaction(self.names | more)

    # -- applying it -------------------------------------------------------------------

    def hides(self, name: object) -> bool:
        """Whether a field of this name is hidden."""
        return normalize(name) in self.names

    def payload(self, value: Any) -> Any:
        """`value` with every hidden field's value replaced by REDACTED, at any depth.
        Anything but a dict or a list (None for a forgotten row, a placeholder for
        one that cannot be decrypted, a string, a number) is returned as it is."""
        if not self.names:
            return value
        if isinstance(value, dict):
            return {
                key: REDACTED if self.hides(key) else self.payload(item)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self.payload(item) for item in value]
        return value

    def restore(self, edited: Any, original: Any) -> Any:
        """A payload a person edited from the redacted view, each hidden field still
        showing REDACTED given back its original value (where the original has that
        field): a resend from the dashboard keeps the values it never showed."""
        if isinstance(edited, dict):
            source = original if isinstance(original, dict) else {}
            return {
                key: source[key]
                if self.hides(key) and item == REDACTED and key in source
                else self.restore(item, source.get(key))
                for key, item in edited.items()
            }
        if isinstance(edited, list):
            items = original if isinstance(original, list) else []
            return [
                self.restore(item, items[n] if n < len(items) else None)
                for n, item in enumerate(edited)
            ]
        return edited

    def hidden_values(self, payload: Any) -> list[str]:
        """The texts of the values under hidden fields (strings, and numbers as JSON
        writes them), of SHORTEST_SCRUBBED characters or more, longest first."""
        found = {text for text in self._hidden(payload) if len(text) >= SHORTEST_SCRUBBED}
        return sorted(found, key=lambda text: (-len(text), text))

    @overload
    def scrub_text(self, text: str, payload: Any) -> str: ...
    @overload
    def scrub_text(self, text: None, payload: Any) -> None: ...
    def scrub_text(self, text: str | None, payload: Any) -> str | None:
        """`text` (an error, a note, an event's detail, an alert) with each hidden value
        of `payload` replaced by REDACTED, in every spelling `Scrubber` knows (a
        provider may quote the body it was sent, or the URL)."""
        if not text or not self.names:
            return text
        return Scrubber((), self.hidden_values(payload), marker=REDACTED)(text)

    def submission(self, sub: Submission) -> Submission:
        """The row as anyone but its channel sees it: its payload redacted, its last
        error and resolution scrubbed."""
        payload = self.payload(sub.payload)
        last_error = self.scrub_text(sub.last_error, sub.payload)
        resolution = self.scrub_text(sub.resolution, sub.payload)
        if (payload, last_error, resolution) == (sub.payload, sub.last_error, sub.resolution):
            return sub
        return replace(sub, payload=payload, last_error=last_error, resolution=resolution)

    def event(self, event: Event, payload: Any) -> Event:
        """An event of the row whose payload is `payload`, its detail scrubbed."""
        detail = self.scrub_text(event.detail, payload)
        return event if detail == event.detail else replace(event, detail=detail)

    def alert(self, alert: Alert) -> Alert:
        """An alert as its log line and its handlers get it: its row redacted and its
        message scrubbed (an alert without a row is returned as it is)."""
        sub = alert.submission
        if sub is None:
            return alert
        message = self.scrub_text(alert.message, sub.payload)
        return Alert(alert.reason, message, self.submission(sub))

    def _hidden(self, value: Any, hidden: bool = False) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                yield from self._hidden(item, hidden or self.hides(key))
        elif isinstance(value, list):
            for item in value:
                yield from self._hidden(item, hidden)
        elif hidden and isinstance(value, str):
            yield value
        elif hidden and isinstance(value, int | float) and not isinstance(value, bool):
            yield json.dumps(value)


def parse_names(text: str) -> list[str]:
    """Comma-separated field names ($DENPYO_REDACT), blank ones skipped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _checked(names: Iterable[str]) -> Iterator[str]:
    """Each name normalized; a name that is not a string, or has nothing but
    separators, is refused (`InvalidInput`): it would hide nothing."""
    for name in names:
        if not isinstance(name, str):
            raise InvalidInput(f"a field name to redact is a string, not {name!r}")
        normalized = normalize(name)
        if not normalized:
            raise InvalidInput(f"{name!r} is no field name to redact: it is all separators")
        yield normalized


def still_redacted(value: Any, path: str = "$") -> list[str]:
    """Where `value` still holds REDACTED as a value (`$.card.number`): a payload
    edited from the redacted view whose hidden field was renamed or moved, so
    that `Redaction.restore` could not give it its value back. Sent as is, the
    provider would get the marker instead of the value."""
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in still_redacted(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [p for n, item in enumerate(value) for p in still_redacted(item, f"{path}[{n}]")]
    return [path] if value == REDACTED else []
