"""denpyo schema 3: running counts by channel and status (PostgreSQL only).

The SQL: store/migrations/<dialect>/0003_status_counts.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0002_claim_indexes")]
    operations = [ApplySchema(3)]
