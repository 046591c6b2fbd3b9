"""A read-only admin for denpyo's two tables: what the people on call look at.

Nothing can be added, changed or deleted here: a row moves only by the ledger's
compare-and-set updates, each written with its event. To retry or resolve a row,
use `denpyo retry` / `denpyo resolve` (or the dashboard), which do that.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q

from denpyo.contrib.django.models import Event, Submission


class ReadOnly:
    """No add, change or delete permission; viewing follows Django's `view_*`
    permissions (a superuser has them all)."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class EventInline(ReadOnly, admin.TabularInline):
    """The row's history, oldest first (read by the index on submission_id, id)."""

    model = Event
    fields = ("at", "kind", "from_status", "to_status", "attempt", "actor", "detail", "duration_ms")
    readonly_fields = fields
    ordering = ("id",)
    extra = 0


@admin.register(Submission)
class SubmissionAdmin(ReadOnly, admin.ModelAdmin):
    list_display = (
        "id",
        "channel",
        "key",
        "status",
        "attempts",
        "error_kind",
        "remote_id",
        "created_at",
        "updated_at",
    )
    list_filter = ("status", "channel")
    search_fields = ("key", "idempotency_key")
    search_help_text = "A key (order:42) or an idempotency key, exactly as written."
    ordering = ("-id",)
    # Counting every row for "n total" is a scan of the table; filtered counts remain.
    show_full_result_count = False
    fieldsets = (
        (None, {"fields": ("channel", "key", "status", "payload", "remote_id", "synced_at")}),
        (
            "Attempts",
            {
                "fields": (
                    "attempts",
                    "next_attempt_at",
                    "error_kind",
                    "last_error",
                    "locked_by",
                    "locked_until",
                    "ordering_key",
                )
            },
        ),
        (
            "Record",
            {
                "fields": (
                    "idempotency_key",
                    "created_at",
                    "updated_at",
                    "resolution",
                    "supersedes",
                )
            },
        ),
    )
    inlines = (EventInline,)

    def get_search_results(self, request: Any, queryset: Any, search_term: str) -> tuple[Any, bool]:
        """An exact match, not Django's case-folded `LIKE '%…%'`: keys are compared
        byte for byte, and with a channel filter the (channel, key) index serves it."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(Q(key=term) | Q(idempotency_key=term)), False
