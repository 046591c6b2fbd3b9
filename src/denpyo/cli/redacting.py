"""What a command prints of a row: through the ledger's redaction (`Ledger(redact=)`,
$DENPYO_REDACT), unless `--full` asks for everything.

On the command line `--full` is allowed to whoever runs it: they hold the
database's credentials, and could read the payload with SQL. Each use is logged
(`denpyo.cli`, INFO) with who asked, for the setups whose logs are kept."""

from __future__ import annotations

import logging

from denpyo.cli.app import Env
from denpyo.domain.actions import person_of
from denpyo.domain.redaction import Redaction
from denpyo.domain.text import visible
from denpyo.engine.operator import operator_actor

log = logging.getLogger("denpyo.cli")

EVERYTHING = Redaction.only()
"""The rule of `--full`: nothing hidden."""


def rule(env: Env, *, full: bool, what: str, by: str | None = None) -> Redaction:
    """The rule the command prints `what` by: the ledger's; with `full`, none, and
    that is logged with the person (`by`, else the login name)."""
    if not full:
        return env.ledger.redaction
    person = person_of(operator_actor(by))
    log.info("full payload of %s shown to %s", visible(what), visible(person))
    return EVERYTHING
