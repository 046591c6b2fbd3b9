-- denpyo schema 11 for PostgreSQL: what the fleet shares about each channel.
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
    channel     text PRIMARY KEY,
    paused_at   timestamptz,
    paused_by   text,
    paused_note text,
    held_until  timestamptz,
    held_note   text,
    down_since  timestamptz,
    down_note   text,
    probe_at    timestamptz,
    probe_every double precision,
    next_start  timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE denpyo_channel_events (
    id      bigserial PRIMARY KEY,
    channel text        NOT NULL,
    kind    text        NOT NULL,
    actor   text        NOT NULL,
    note    text,
    at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX denpyo_channel_events_channel ON denpyo_channel_events (channel, id);
