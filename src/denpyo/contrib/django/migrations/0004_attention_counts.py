"""denpyo schema 4: counts of what needs a person, leaner claim indexes (PostgreSQL only).

The SQL: store/migrations/<dialect>/0004_attention_counts.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0003_status_counts")]
    operations = [ApplySchema(4)]
