"""denpyo schema 5: an index to find the resend that replaced a row (MariaDB has it already).

The SQL: store/migrations/<dialect>/0005_supersedes_index.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0004_attention_counts")]
    operations = [ApplySchema(5)]
