-- denpyo schema 3 under the distributed SQL profile: no triggers (CockroachDB has
-- none of PostgreSQL's statement-level triggers with transition tables). The counts
-- by channel and status are computed from the rows when read
-- (sql/postgresql-distributed.sql); the table stays, empty, so that the schema has
-- the same tables as PostgreSQL's.
CREATE TABLE denpyo_status_counts (
    channel text   NOT NULL,
    status  text   NOT NULL,
    n       bigint NOT NULL
);
