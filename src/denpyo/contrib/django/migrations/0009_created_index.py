"""denpyo schema 9: on SQLite and PostgreSQL the index on (status, created_at) becomes
one on created_at, which a settle never writes (nothing to change on MariaDB).

The SQL: store/migrations/<dialect>/0009_created_index.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0008_running_counts")]
    operations = [ApplySchema(9)]
