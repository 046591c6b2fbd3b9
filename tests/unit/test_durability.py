"""When a commit acknowledged to denpyo could still be lost with its database server
(domain/durability.py): the judgement `denpyo status`, the worker's start-up
warning and the `durability_at_risk` alert share."""

from __future__ import annotations

import pytest

from denpyo.domain.durability import Durability


@pytest.mark.parametrize(
    ("durability", "says"),
    [
        (Durability(0, "", "off"), "synchronous_commit is off"),
        (Durability(1, "", "on"), "1 standby streaming, none synchronous"),
        (Durability(2, "  ", "on", 0), "2 standbys streaming, none synchronous"),
        (Durability(1, "s1", "local", 1), "synchronous_commit is local"),
    ],
)
def test_a_commit_a_failover_could_lose_is_at_risk(durability: Durability, says: str) -> None:
    assert durability.risk is not None and says in durability.risk
    assert durability.describe().startswith(f"at risk: {durability.risk}")


@pytest.mark.parametrize(
    ("durability", "says"),
    [
        (Durability(0, "", "on"), "no standby streaming; synchronous_commit = on"),
        (Durability(0, "", "local"), "no standby streaming; synchronous_commit = local"),
        (Durability(1, "s1", "on", 1), "1 standby, synchronous (s1); synchronous_commit = on"),
        (Durability(1, "s1", "remote_write", None), "synchronous_commit = remote_write"),
        (Durability(0, "s1", "on", 0), "but no standby is streaming: every commit waits"),
    ],
)
def test_a_durable_commit_is_not_at_risk(durability: Durability, says: str) -> None:
    assert durability.risk is None
    assert says in durability.describe()
