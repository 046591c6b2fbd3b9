"""denpyo schema 11: what the fleet shares about each channel (denpyo_channels,
denpyo_channel_events): a person's pause, the provider's back-off and down state,
and the fleet limits' shared clock.

The SQL: store/migrations/<dialect>/0011_channel_controls.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0010_kept_keys")]
    operations = [ApplySchema(11)]
