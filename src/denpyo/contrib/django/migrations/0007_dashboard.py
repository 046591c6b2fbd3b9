"""denpyo schema 7: what the dashboard reads, served by indexes (the needs-a-person
queue, pages of the list, the chart's per-minute outcomes).

The SQL: store/migrations/<dialect>/0007_dashboard.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0006_synced_index")]
    operations = [ApplySchema(7)]
