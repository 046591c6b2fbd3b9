"""An order and its invoice email commit together, or neither does."""

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from denpyo.contrib.django import get_ledger
from shop.models import Order


class Declined(Exception):
    """Raised inside the transaction, after the enqueue: both roll back."""


@csrf_exempt  # an API that the page calls with curl; keep CSRF for your forms
@require_POST
def checkout(request: HttpRequest) -> JsonResponse:
    total = int(request.POST["total"])
    try:
        with transaction.atomic():
            order = Order.objects.create(email=request.POST["email"], total=total)
            get_ledger().enqueue(
                "invoice-email",
                f"order:{order.pk}",
                {"to": order.email, "total": total},
                conn=connection,
            )
            if total <= 0:
                raise Declined("the total must be positive")
    except Declined as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
    return JsonResponse({"order_id": order.pk})


@require_GET
def invoice_email(request: HttpRequest, order_id: int) -> JsonResponse:
    sub = get_ledger().get("invoice-email", f"order:{order_id}")
    if sub is None:
        return JsonResponse({"detail": "no invoice email for this order"}, status=404)
    return JsonResponse({"status": sub.status, "remote_id": sub.remote_id})
