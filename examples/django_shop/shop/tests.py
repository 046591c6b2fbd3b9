"""`python manage.py test shop`: an order's email is enqueued with it, or not at all."""

from django.test import TransactionTestCase

from denpyo.contrib.django import get_ledger
from shop.models import Order


class CheckoutTests(TransactionTestCase):
    # the ledger's rows outlive the test's flush: each test its own order ids
    reset_sequences = False

    def test_an_order_and_its_email_commit_together(self) -> None:
        answer = self.client.post("/orders", {"email": "a@example.com", "total": 1200})
        order = Order.objects.get(pk=answer.json()["order_id"])
        sub = get_ledger().get("invoice-email", f"order:{order.pk}")
        assert sub is not None and sub.payload == {"to": "a@example.com", "total": 1200}

    def test_a_declined_order_leaves_neither(self) -> None:
        before = Order.objects.count()
        answer = self.client.post("/orders", {"email": "b@example.com", "total": 0})
        assert answer.status_code == 400 and Order.objects.count() == before
