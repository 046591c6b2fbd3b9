-- denpyo schema 11 for SQLite: what the fleet shares about each channel.
--
-- 1. denpyo_channels: one row per channel, written rarely and read once per poll
--    by every worker: whether a person paused it (who, when, why), how long the
--    provider asked the whole channel to wait (a 429 or 503 with Retry-After), and
--    whether the provider is down (since when, the failure that said so, when the
--    next probe call may start, and the wait after it). `next_start` is the fleet rate limit's clock: the
--    earliest instant the next call of the channel may start; a worker reserves
--    starts for the rows it holds by moving it on, 1/rate seconds per call.
-- 2. denpyo_channel_events: the channel's history: paused, resumed, down, up, each
--    with who and why.
CREATE TABLE denpyo_channels (
    channel     TEXT PRIMARY KEY,
    paused_at   TEXT,
    paused_by   TEXT,
    paused_note TEXT,
    held_until  TEXT,
    held_note   TEXT,
    down_since  TEXT,
    down_note   TEXT,
    probe_at    TEXT,
    probe_every REAL,
    next_start  TEXT,
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
) WITHOUT ROWID;

CREATE TABLE denpyo_channel_events (
    id      INTEGER PRIMARY KEY,
    channel TEXT NOT NULL,
    kind    TEXT NOT NULL,
    actor   TEXT NOT NULL,
    note    TEXT,
    at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE INDEX denpyo_channel_events_channel ON denpyo_channel_events (channel, id);
