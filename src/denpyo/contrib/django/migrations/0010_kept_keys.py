"""denpyo schema 10: keys and counts outlive their rows (denpyo_keys,
denpyo_removed_counts), so that a pruned key is never sent again and `denpyo report`
is the same before and after a prune.

The SQL: store/migrations/<dialect>/0010_kept_keys.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0009_created_index")]
    operations = [ApplySchema(10)]
