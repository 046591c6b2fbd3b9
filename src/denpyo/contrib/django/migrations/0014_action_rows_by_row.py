"""denpyo schema 14: the actions on a row, found by the row (an index on
denpyo_action_rows.submission_id, which a forget reads by).

The SQL: store/migrations/<dialect>/0014_action_rows_by_row.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0013_traces_and_forgetting")]
    operations = [ApplySchema(14)]
