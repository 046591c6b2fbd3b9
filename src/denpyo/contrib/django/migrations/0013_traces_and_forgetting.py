"""denpyo schema 13: the trace a row was written in (traceparent, tracestate) and
forgotten payloads (forgotten_at).

The SQL: store/migrations/<dialect>/0013_traces_and_forgetting.sql, run by ApplySchema."""

from django.db import migrations

from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    dependencies = [("denpyo", "0012_actions")]
    operations = [ApplySchema(13)]
