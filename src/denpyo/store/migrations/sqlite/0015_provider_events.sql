-- denpyo schema 15 for SQLite: what the providers told by webhook.
--
-- denpyo_provider_events: one row per event a provider's webhook delivered (a
-- Stripe event, a SendGrid event, a Twilio status callback, an SES notification),
-- recorded once: providers retry, and the second delivery of (provider, event_id)
-- finds the first. submission_id names the row it settled or added to (found by
-- its idempotency key, else by its remote id); NULL: the ledger has no row of it,
-- and the audit lists it. detail: what the provider said, scrubbed of the payload's
-- values where payloads are encrypted, replaced by a forget of its row.
-- The index on denpyo_submissions (remote_id) finds a row by the provider's id.
CREATE TABLE denpyo_provider_events (
    id              INTEGER PRIMARY KEY,
    provider        TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    kind            TEXT NOT NULL,
    received_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    submission_id   INTEGER,
    idempotency_key TEXT,
    remote_id       TEXT,
    detail          TEXT,
    UNIQUE (provider, event_id)
);

CREATE INDEX denpyo_provider_events_unknown ON denpyo_provider_events (received_at)
    WHERE submission_id IS NULL;
CREATE INDEX denpyo_provider_events_row ON denpyo_provider_events (submission_id);
CREATE INDEX denpyo_submissions_remote_id ON denpyo_submissions (remote_id);
