"""The shop's channels, registered once per process on its ledger (from ready())."""

import os

from denpyo.channels.http import HttpChannel
from denpyo.contrib.django import get_ledger

# The fake mail API of the page (python -m denpyo.testing --port 8025); yours here.
MAIL_URL = os.environ.get("MAIL_URL", "http://127.0.0.1:8025")

mail = HttpChannel(url=f"{MAIL_URL}/send", lookup_url=f"{MAIL_URL}/lookup/{{idempotency_key}}")
get_ledger().channel("invoice-email", verify=mail.verifier)(mail.send)
