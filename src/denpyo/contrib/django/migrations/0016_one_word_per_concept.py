"""denpyo schema 16: one word per concept in what is stored: the action states
'awaiting_approval', 'declined', 'lapsed', 'in_progress' and `lapses_at` on
denpyo_actions; `throttled_until`, `throttled_note` on denpyo_channels.

The SQL: store/migrations/<dialect>/0016_one_word_per_concept.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0015_provider_events")]
    operations = [ApplySchema(16)]
