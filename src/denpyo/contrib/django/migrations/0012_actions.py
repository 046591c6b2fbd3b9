"""denpyo schema 12: what people did and what waits for a second person
(denpyo_actions, denpyo_action_rows): the action log, two-person requests, and
bulk actions over a frozen set of rows.

The SQL: store/migrations/<dialect>/0012_actions.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0011_channel_controls")]
    operations = [ApplySchema(12)]
