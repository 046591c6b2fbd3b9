"""denpyo schema 8: running counts by channel and status on SQLite and MariaDB, kept
by triggers, as PostgreSQL has had since schema 3 (nothing to change there).

The SQL: store/migrations/<dialect>/0008_running_counts.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0007_dashboard")]
    operations = [ApplySchema(8)]
