-- denpyo schema 5 for PostgreSQL: find the resend that replaced a row by index (a
-- submit of a resolved key returns it; `show` prints the chain). Partial: only
-- resends carry `supersedes`.
CREATE INDEX IF NOT EXISTS denpyo_submissions_supersedes ON denpyo_submissions (supersedes)
    WHERE supersedes IS NOT NULL;
