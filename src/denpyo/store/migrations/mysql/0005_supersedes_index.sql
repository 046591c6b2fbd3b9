-- denpyo schema 5 for MariaDB: nothing to add. The foreign key on `supersedes`
-- already keeps an index on it (schema 1); the number stays the same on every
-- database.
DO 0;
