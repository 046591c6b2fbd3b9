-- denpyo schema 15 for MariaDB: what the providers told by webhook.
--
-- denpyo_provider_events: one row per event a provider's webhook delivered (a
-- Stripe event, a SendGrid event, a Twilio status callback, an SES notification),
-- recorded once: providers retry, and the second delivery of (provider, event_id)
-- finds the first. submission_id names the row it settled or added to (found by
-- its idempotency key, else by its remote id); NULL: the ledger has no row of it,
-- and the audit lists it. detail: what the provider said, scrubbed of the payload's
-- values where payloads are encrypted, replaced by a forget of its row.
-- The index on denpyo_submissions (remote_id) finds a row by the provider's id (its
-- first 191 characters: remote_id is TEXT).
CREATE TABLE IF NOT EXISTS denpyo_provider_events (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    provider        VARCHAR(32)  NOT NULL,
    event_id        VARCHAR(255) NOT NULL,
    kind            VARCHAR(64)  NOT NULL,
    received_at     DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    submission_id   BIGINT       NULL,
    idempotency_key VARCHAR(64)  NULL,
    remote_id       TEXT         NULL,
    detail          TEXT         NULL,
    CONSTRAINT denpyo_provider_events_once UNIQUE KEY (provider, event_id),
    KEY denpyo_provider_events_unknown (submission_id, received_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE INDEX denpyo_submissions_remote_id ON denpyo_submissions (remote_id(191));
