"""denpyo schema 2: one partial index per kind of claim (MariaDB: nothing to change).

The SQL: store/migrations/<dialect>/0002_claim_indexes.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0001_initial")]
    operations = [ApplySchema(2)]
