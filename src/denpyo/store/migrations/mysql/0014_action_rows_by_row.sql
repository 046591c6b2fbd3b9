-- denpyo schema 14 for MariaDB: the actions on a row, found by the row.
--
-- denpyo_action_rows is keyed by (action_id, submission_id): the rows behind an
-- action. A forget asks the other way round (which actions name these rows, whose
-- texts may quote the payload being erased; which forget erased a removed row's
-- payload), and the table grows by every bulk action for years: without this index
-- each of its batches would read the table whole.
CREATE INDEX denpyo_action_rows_by_row ON denpyo_action_rows (submission_id);
