"""denpyo schema 15: what the providers told by webhook (denpyo_provider_events,
each (provider, event id) once), and an index on denpyo_submissions.remote_id.

The SQL: store/migrations/<dialect>/0015_provider_events.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0014_action_rows_by_row")]
    operations = [ApplySchema(15)]
