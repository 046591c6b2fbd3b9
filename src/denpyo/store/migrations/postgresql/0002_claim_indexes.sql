-- denpyo schema 2 for PostgreSQL: one partial index per kind of claim.
-- A worker looks for rows to send (never attempted, or a transient failure due)
-- and, less often, for rows in doubt (lease run out, or an ambiguous failure).
-- Each index holds only the rows its claim can take, in the claim's order, so
-- the claim reads a few index entries however many rows wait or are settled.
CREATE INDEX denpyo_submissions_ready ON denpyo_submissions (channel, next_attempt_at, id)
    WHERE (status = 'requesting' AND locked_until IS NULL)
       OR (status = 'failed' AND error_kind = 'transient');

CREATE INDEX denpyo_submissions_in_doubt ON denpyo_submissions (channel, next_attempt_at, id)
    WHERE (status = 'requesting' AND locked_until IS NOT NULL)
       OR (status = 'failed' AND error_kind = 'ambiguous');

DROP INDEX denpyo_submissions_due;
