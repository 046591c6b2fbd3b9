"""Schema 16 rewrites the words a schema 15 database stored: the action log's states
and its `lapses_at`, a throttled channel's columns. A database of the previous
release upgrades, and this denpyo reads its actions and channels as they were."""

from __future__ import annotations

from typing import cast

import pytest

from denpyo.domain.actions import ActionState
from denpyo.domain.channel_state import Mode
from denpyo.store import dialect_of, open_store
from denpyo.store.sql_store import SqlStore

OLD_STATES = {
    "requested": ActionState.AWAITING_APPROVAL,
    "rejected": ActionState.DECLINED,
    "expired": ActionState.LAPSED,
    "running": ActionState.IN_PROGRESS,
    "paused": ActionState.PAUSED,
    "done": ActionState.DONE,
}
FAR = "2999-01-01 00:00:00.000"


def test_a_schema_15_database_reads_in_the_new_words(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import denpyo.store.sql_store as sql_store

    every = sql_store.load_migrations(dialect_of(empty_url))
    assert [version for version, _ in every][-1] == 16
    store = open_store(empty_url)
    try:
        monkeypatch.setattr(sql_store, "load_migrations", lambda dialect: every[:15])
        assert store.migrate() == list(range(1, 16))
        lapses = {"requested": f"'{FAR}'"}
        rows = [
            f"INSERT INTO denpyo_actions (kind, scope, target, params, state, actor, note, "
            f"expires_at) VALUES ('retry', 'rows', '{i}', '{{}}', '{state}', 'operator:ann', "
            f"'why {state}', {lapses.get(state, 'NULL')});"
            for i, state in enumerate(OLD_STATES, 1)
        ]
        rows.append(
            "INSERT INTO denpyo_channels (channel, held_until, held_note) "
            f"VALUES ('sms', '{FAR}', 'HTTP 429, Retry-After');"
        )
        with cast(SqlStore, store).transaction() as tx:
            tx.script("\n".join(rows))
        monkeypatch.undo()
        assert store.migrate() == [16]

        read = {record.note.removeprefix("why "): record for record in store.actions(limit=50)}
        assert {old: record.state for old, record in read.items()} == OLD_STATES
        waiting = read["requested"]
        assert waiting.lapses_at is not None and waiting.lapses_at.year == 2999
        assert all(r.lapses_at is None for old, r in read.items() if old != "requested")
        assert store.actions(state=ActionState.AWAITING_APPROVAL, limit=5) == [waiting]
        [sms] = store.channel_states()
        assert sms.mode is Mode.THROTTLED and sms.throttled_note == "HTTP 429, Retry-After"
        assert store.migrate() == []
    finally:
        store.close()
