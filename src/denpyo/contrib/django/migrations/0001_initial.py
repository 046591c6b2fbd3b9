"""denpyo schema 1: the submissions and events tables (and denpyo_schema_version)."""

from django.db import migrations, models

from denpyo.contrib.django.models import ERROR_KIND_CHOICES, STATUS_CHOICES
from denpyo.contrib.django.schema import ApplySchema


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        ApplySchema(1),
        # The models are unmanaged: these record them for Django, and create nothing.
        migrations.CreateModel(
            name="Submission",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("channel", models.CharField(max_length=100)),
                ("key", models.CharField(max_length=255)),
                ("idempotency_key", models.CharField(max_length=64, unique=True)),
                ("payload", models.JSONField()),
                ("status", models.CharField(choices=STATUS_CHOICES, max_length=16)),
                ("attempts", models.IntegerField()),
                ("next_attempt_at", models.DateTimeField(null=True)),
                ("locked_by", models.TextField(null=True)),
                ("locked_until", models.DateTimeField(null=True)),
                ("remote_id", models.TextField(null=True)),
                ("last_error", models.TextField(null=True)),
                (
                    "error_kind",
                    models.CharField(choices=ERROR_KIND_CHOICES, max_length=16, null=True),
                ),
                ("ordering_key", models.CharField(max_length=255, null=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                ("synced_at", models.DateTimeField(null=True)),
                ("resolution", models.TextField(null=True)),
                (
                    "supersedes",
                    models.ForeignKey(
                        db_column="supersedes",
                        db_constraint=False,
                        null=True,
                        on_delete=models.DO_NOTHING,
                        related_name="superseded_by",
                        to="denpyo.submission",
                    ),
                ),
            ],
            options={"db_table": "denpyo_submissions", "ordering": ("-id",), "managed": False},
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "submission",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=models.DO_NOTHING,
                        related_name="events",
                        to="denpyo.submission",
                    ),
                ),
                ("at", models.DateTimeField()),
                ("kind", models.CharField(max_length=64)),
                ("from_status", models.CharField(max_length=16, null=True)),
                ("to_status", models.CharField(max_length=16, null=True)),
                ("attempt", models.IntegerField()),
                ("actor", models.TextField()),
                ("detail", models.TextField(null=True)),
                ("duration_ms", models.IntegerField(null=True)),
            ],
            options={"db_table": "denpyo_events", "ordering": ("id",), "managed": False},
        ),
    ]
