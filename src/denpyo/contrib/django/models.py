"""denpyo's two tables as Django models, for reading (the admin, your own queries).

`managed = False`: the tables are made by this app's migrations from denpyo's
own SQL files (see schema.py), never from these fields. Only the ledger writes
them: a row moves by the engine's compare-and-set updates, each with its event,
which a save through the ORM would skip; the admin only reads.
"""

from __future__ import annotations

from django.db import models

from denpyo.domain.status import ErrorKind, Status

STATUS_CHOICES = [(status.value, status.value) for status in Status]
ERROR_KIND_CHOICES = [(kind.value, kind.value) for kind in ErrorKind]


class Submission(models.Model):
    """One intended call: a row of denpyo_submissions (README, "The tables")."""

    id = models.BigAutoField(primary_key=True)
    channel = models.CharField(max_length=100)
    key = models.CharField(max_length=255)
    idempotency_key = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=STATUS_CHOICES)
    attempts = models.IntegerField()
    next_attempt_at = models.DateTimeField(null=True)
    locked_by = models.TextField(null=True)
    locked_until = models.DateTimeField(null=True)
    remote_id = models.TextField(null=True)
    last_error = models.TextField(null=True)
    error_kind = models.CharField(max_length=16, null=True, choices=ERROR_KIND_CHOICES)
    ordering_key = models.CharField(max_length=255, null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    synced_at = models.DateTimeField(null=True)
    resolution = models.TextField(null=True)
    supersedes = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        db_column="supersedes",
        db_constraint=False,
        null=True,
        related_name="superseded_by",
    )

    class Meta:
        managed = False
        db_table = "denpyo_submissions"
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"{self.channel}:{self.key}"


class Event(models.Model):
    """One creation, attempt, settle, verify, release or person's action: a row of
    denpyo_events."""

    id = models.BigAutoField(primary_key=True)
    submission = models.ForeignKey(
        Submission, on_delete=models.DO_NOTHING, db_constraint=False, related_name="events"
    )
    at = models.DateTimeField()
    kind = models.CharField(max_length=64)
    from_status = models.CharField(max_length=16, null=True)
    to_status = models.CharField(max_length=16, null=True)
    attempt = models.IntegerField()
    actor = models.TextField()
    detail = models.TextField(null=True)
    duration_ms = models.IntegerField(null=True)

    class Meta:
        managed = False
        db_table = "denpyo_events"
        ordering = ("id",)

    def __str__(self) -> str:
        return f"{self.kind} {self.from_status or '-'} → {self.to_status or '-'}"
