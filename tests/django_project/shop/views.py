"""Checkout: the order and its invoice email commit together, or neither does."""

from typing import Any

from django.db import connection, transaction

from denpyo.contrib.django import get_ledger
from django_project.shop.models import Order


def checkout(email: str, total: int, *, fail_after_enqueue: bool = False) -> Order:
    with transaction.atomic():
        order = Order.objects.create(email=email, total=total)
        payload: dict[str, Any] = {"to": email, "total": total}
        get_ledger().enqueue("invoice-email", f"order:{order.pk}", payload, conn=connection)
        if fail_after_enqueue:
            raise RuntimeError("the payment was declined")
    return order
