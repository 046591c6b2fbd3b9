-- denpyo schema 13 for MariaDB: the trace a row was written in, and forgotten payloads.
--
-- 1. traceparent, tracestate: the W3C trace context that was active when the row
--    was written (`submit`, `enqueue`…), NULL when there was none. The worker's
--    attempt and verify spans link to it, so the request that asked for a call and
--    the call, seconds or hours later, are one trace.
-- 2. forgotten_at: when a person erased the row's payload (`denpyo forget`): the
--    payload is JSON null and the texts quoting it are gone; the slip (status,
--    times, ids, remote id, history) stays, and the row is never sent again. On
--    denpyo_keys, the same for a removed row (its archive was rewritten).
ALTER TABLE denpyo_submissions
    ADD COLUMN traceparent  TEXT NULL,
    ADD COLUMN tracestate   TEXT NULL,
    ADD COLUMN forgotten_at DATETIME(6) NULL;

ALTER TABLE denpyo_keys ADD COLUMN forgotten_at DATETIME(6) NULL;
