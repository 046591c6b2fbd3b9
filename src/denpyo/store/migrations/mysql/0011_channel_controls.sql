-- denpyo schema 11 for MariaDB: what the fleet shares about each channel.
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
CREATE TABLE IF NOT EXISTS denpyo_channels (
    channel     VARCHAR(100) NOT NULL PRIMARY KEY,
    paused_at   DATETIME(6)  NULL,
    paused_by   TEXT         NULL,
    paused_note TEXT         NULL,
    held_until  DATETIME(6)  NULL,
    held_note   TEXT         NULL,
    down_since  DATETIME(6)  NULL,
    down_note   TEXT         NULL,
    probe_at    DATETIME(6)  NULL,
    probe_every DOUBLE       NULL,
    next_start  DATETIME(6)  NULL,
    updated_at  DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS denpyo_channel_events (
    id      BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    channel VARCHAR(100) NOT NULL,
    kind    VARCHAR(16)  NOT NULL,
    actor   TEXT         NOT NULL,
    note    TEXT         NULL,
    at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    KEY denpyo_channel_events_channel (channel, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
