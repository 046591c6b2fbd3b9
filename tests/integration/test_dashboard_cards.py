"""Each overview card opens the list it counts: the number on the card is the number
of rows behind its link, on every database."""

from __future__ import annotations

import html
import json
import re

from click.testing import CliRunner
from starlette.testclient import TestClient

import denpyo
from dashboard_seed import STATES, row_in_state
from denpyo.cli import main as cli
from denpyo.web import create_app

TOKEN = "cards-test-token"
LISTED = {
    "exhausted": "--status failed --not-in-doubt --needs-person",
    "rejected, unresolved": "--status rejected --unresolved",
}
CARD = re.compile(
    r'<a class="card[^"]*" href="(/submissions\?[^"]*)">\s*'
    r'<span class="n">(\d+)</span><span class="what">([^<]+)</span>'
)


def test_each_card_counts_the_rows_behind_its_link(db_url: str) -> None:
    with denpyo.Ledger(db_url) as ledger:
        ledger.migrate()
        for n, state in enumerate(STATES * 2):
            row_in_state(ledger, state, f"{state}-{n}")
        client = TestClient(create_app(ledger, token=TOKEN), base_url="http://127.0.0.1:8470")
        client.headers.update({"authorization": f"Bearer {TOKEN}", "x-denpyo-by": "script"})
        cards = CARD.findall(client.get("/").text)
        named = {what: int(n) for _, n, what in cards}
        assert named["exhausted"] == 2 and named["rejected, unresolved"] == 2, named
        for link, n, what in cards:
            page = client.get(html.unescape(link)).text
            rows = re.findall(r'name="ids" value="(\d+)"', page)
            assert len(rows) == int(n), (what, link)
    for what, options in LISTED.items():  # the same rows by `denpyo list`, as documented
        listed = CliRunner().invoke(cli, ["--db", db_url, "list", *options.split(), "--json"])
        assert listed.exit_code == 0, listed.output
        assert len(json.loads(listed.output)) == named[what], what
