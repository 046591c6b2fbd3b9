"""denpyo schema 6: synced rows indexed by channel and time, for the audit.

The SQL: store/migrations/<dialect>/0006_synced_index.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0005_supersedes_index")]
    operations = [ApplySchema(6)]
