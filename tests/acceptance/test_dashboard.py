"""The dashboard in a real browser: Debian's Chromium driven by Playwright.

Each page is loaded and photographed (into the test's temporary directory, and into
docs/screenshots/ when DENPYO_SCREENSHOTS is set), and actions are performed through
the page and checked in the database: an abandon with a note, a bulk retry that shows
its dry run first, a search by key, and every action button of a row in every state.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import denpyo
from browser import CHROMIUM, CHROMIUM_FLAGS, Shots, patient, serving
from dashboard_seed import SCRIPT, STATES, row_in_state, seed
from denpyo.engine import operator as op
from denpyo.engine import people
from denpyo.web import create_app

playwright_api = pytest.importorskip("playwright.sync_api")

TOKEN = "browser-test-token"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, denpyo.Ledger, dict[str, int]]]:
    """The dashboard over a seeded SQLite ledger, served by uvicorn on loopback."""
    ledger = denpyo.Ledger(f"sqlite:///{tmp_path}/browser.db")
    ledger.migrate()
    ids = seed(ledger, synced=40)
    try:
        with serving(create_app(ledger, token=TOKEN, refresh=2.0)) as base:
            yield base, ledger, ids
    finally:
        ledger.close()


@pytest.fixture
def served_people(
    tmp_path: Path,
) -> Iterator[tuple[str, denpyo.Ledger, dict[str, int], dict[str, str]]]:
    """The dashboard with a users file: a viewer and an operator, each with a token."""
    ledger = denpyo.Ledger(f"sqlite:///{tmp_path}/people.db")
    ledger.migrate()
    ids = seed(ledger, synced=5)
    users = tmp_path / "users.json"
    tokens = {}
    for name, role in (("vera", "viewer"), ("otto", "operator")):
        _, token = people.add(users, name, role)
        assert token is not None
        tokens[name] = token
    try:
        with serving(create_app(ledger, users=users, refresh=2.0)) as base:
            yield base, ledger, ids, tokens
    finally:
        ledger.close()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    with playwright_api.sync_playwright() as pw:
        context = patient(
            pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1360, "height": 900},
            )
        )
        dialogs: list[str] = []
        tab = context.new_page()
        tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        tab.dialogs = dialogs
        try:
            yield tab
        finally:
            context.close()


def sign_in(page: Any, base: str, shots: Shots, name: str = "alice", token: str = TOKEN) -> None:
    page.goto(f"{base}/attention")
    assert "/login" in page.url
    shots.take(page, "1-sign-in")
    page.fill("input[name=name]", name)
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/attention")


def test_every_page_and_an_abandon_through_the_browser(
    served: tuple[str, denpyo.Ledger, dict[str, int]], page: Any, tmp_path: Path
) -> None:
    base, ledger, ids = served
    shots = Shots(tmp_path)
    sign_in(page, base, shots)

    page.goto(f"{base}/")
    assert page.locator(".card.hot .n").inner_text() == "4"  # 2 rejected, 1 exhausted, 1 in doubt
    assert page.locator("svg.chart polyline").count() == 2
    shots.take(page, "2-overview")

    page.goto(f"{base}/attention")
    rows = page.locator("table.rows tbody tr")
    assert rows.count() == 4
    shots.take(page, "3-needs-a-person")

    page.goto(f"{base}/submissions")
    assert page.locator("table.rows tbody tr").count() == 46
    shots.take(page, "4-submissions")

    # Support's question in one step: was the invoice for order 42 sent?
    page.select_option("form.search select[name=channel]", "invoice-email")
    page.fill("form.search input[name=q]", "order:42")
    page.click("form.search button")
    page.wait_for_url("**q=order%3A42**")
    assert page.locator("table.rows tbody tr").count() == 1
    assert "synced" in page.locator("table.rows tbody tr").inner_text()
    shots.take(page, "5-search")

    # The payload is shown as text, its script never run, its card number hidden.
    page.click("table.rows tbody tr a >> nth=0")
    page.wait_for_url(f"{base}/submissions/{ids['secret']}")
    assert SCRIPT in page.locator("pre.payload").inner_text()
    assert "[redacted]" in page.locator("pre.payload").inner_text()
    assert page.dialogs == []

    # Abandon a rejected row with a note, through its page.
    page.goto(f"{base}/submissions/{ids['rejected2']}")
    shots.take(page, "6-submission")
    form = page.locator("form[action$='/abandon']")
    form.locator("textarea[name=note]").fill("the customer closed the account")
    form.locator("button").click()
    page.wait_for_url("**done=abandoned**")
    assert "Done: abandoned" in page.locator(".flash.ok").inner_text()
    shots.take(page, "7-after-abandon")
    row = ledger.get_by_id(ids["rejected2"])
    assert row is not None
    assert row.resolution == "abandoned by operator:alice: the customer closed the account"
    assert [e.actor for e in ledger.events(row.id)][-1] == "operator:alice"

    # A time no database can compare is the person's to fix: a 400 page with the reason.
    refused = page.goto(f"{base}/submissions?since=0001-01-01")
    assert refused is not None and refused.status == 400
    assert "'0001-01-01'" in page.locator(".flash.error").inner_text()
    assert refused.headers["x-frame-options"] == "DENY"
    assert page.locator("header.top nav").count() == 1  # still signed in, with the menu
    shots.take(page, "10-refused")


def test_a_bulk_retry_shows_its_dry_run_and_acts_on_the_rows_seen(
    served: tuple[str, denpyo.Ledger, dict[str, int]], page: Any, tmp_path: Path
) -> None:
    base, ledger, ids = served
    shots = Shots(tmp_path)
    sign_in(page, base, shots)
    page.goto(f"{base}/attention")
    for name in ("exhausted", "rejected"):
        page.check(f"input[name=ids][value='{ids[name]}']")
    page.click("button[name=action][value=retry]")
    page.wait_for_url(f"{base}/bulk")
    assert "Retry 1 of the 2 rows" in page.locator("h1").inner_text()
    assert "rejected by the provider" in page.locator("table.rows").inner_text()
    shots.take(page, "8-bulk-dry-run")
    unchanged = ledger.get_by_id(ids["exhausted"])
    assert unchanged is not None and unchanged.next_attempt_at is None  # nothing yet

    # A row that arrives meanwhile is not swept in: the ids are those ticked.
    late = ledger.enqueue("invoice-email", "order:late", {"to": "late@example.com"})
    page.fill("form.act textarea[name=note]", "the provider's outage is over")
    page.click("form.act button[type=submit]")
    page.wait_for_selector("h1:has-text('1 done')")
    shots.take(page, "9-bulk-done")
    retried = ledger.get_by_id(ids["exhausted"])
    assert retried is not None and retried.next_attempt_at is not None
    assert [e.kind for e in ledger.events(retried.id)][-1] == "retry"
    assert [e.actor for e in ledger.events(retried.id)][-1] == "operator:alice"
    rejected = ledger.get_by_id(ids["rejected"])
    assert rejected is not None and rejected.resolution is None
    assert [e.kind for e in ledger.events(late.id)] == ["created"]


def test_the_overview_refreshes_itself(
    served: tuple[str, denpyo.Ledger, dict[str, int]], page: Any, tmp_path: Path
) -> None:
    base, ledger, ids = served
    sign_in(page, base, Shots(tmp_path))
    page.goto(f"{base}/")
    assert page.locator(".card.hot .n").inner_text() == "4"
    op.resolve_abandon(ledger, ids["rejected"], note="resolved in another tab", by="bob")
    # htmx polls the counts (every 2 s here); no reload.
    playwright_api.expect(page.locator(".card .n").first).to_have_text("3")


# What a row's page offers, by state: "!" marks an action offered with the "although
# the call may have arrived" checkbox (force_in_doubt).
OFFERED = {
    "never-attempted": {"abandon", "resend"},  # no retry: a worker will send it
    "in-flight": set(),
    "in-doubt-requesting": {"retry!", "abandon", "resend!", "mark-synced"},
    "failed-due": {"retry", "abandon", "resend", "mark-synced"},
    "failed-exhausted": {"retry", "abandon", "resend", "mark-synced"},
    "failed-ambiguous": {"retry!", "abandon", "resend!", "mark-synced"},
    "rejected": {"abandon", "resend"},
    "synced": set(),
    "abandoned": {"resend", "mark-synced"},
    "resent": set(),
}


def offered(page: Any) -> set[str]:
    """The action forms on a row's page, by the last part of their URL."""
    found = set()
    for form in page.locator("section.actions form.act").all():
        verb = str(form.get_attribute("action")).rsplit("/", 1)[-1]
        found.add(verb + ("!" if form.locator("input[name=force_in_doubt]").count() else ""))
    return found


def test_every_action_a_page_offers_is_accepted(
    served: tuple[str, denpyo.Ledger, dict[str, int]], page: Any, tmp_path: Path
) -> None:
    """A row in each state, and for each action button its page shows, a fresh copy of
    the row acted on through that button: the engine must accept every action a page
    offers (a refusal shows its error page instead of "Done")."""
    base, ledger, _ = served
    shots = Shots(tmp_path)
    sign_in(page, base, shots)
    assert set(OFFERED) == set(STATES)
    for state in STATES:
        first = row_in_state(ledger, state, f"{state}:look")
        page.goto(f"{base}/submissions/{first}")
        actions = offered(page)
        assert actions == OFFERED[state], state
        shots.take(page, f"state-{state}")
        if not actions:
            text = page.locator("section.actions").inner_text()
            assert "Nothing to do" in text, (state, text)
        for action in sorted(actions):
            verb = action.rstrip("!")
            sid = row_in_state(ledger, state, f"{state}:{verb}")
            page.goto(f"{base}/submissions/{sid}")
            assert offered(page) == actions, (state, verb)
            form = page.locator(f"section.actions form.act[action$='/{verb}']")
            form.locator("textarea[name=note]").fill(f"{verb} of a {state} row, checked")
            if verb == "mark-synced":
                form.locator("input[name=remote_id]").fill("msg_found_by_hand")
            if action.endswith("!"):
                form.locator("input[name=force_in_doubt]").check()
            with page.expect_navigation():
                form.locator("button[type=submit]").click()
            done = "done=" in page.url and page.locator(".flash.ok").count() == 1
            refused = page.locator(".flash.error").count()
            assert done and not refused, (state, verb, page.locator("main").inner_text())
            row = ledger.get_by_id(sid)
            assert row is not None
            last = ledger.events(sid)[-1]
            assert last.actor == "operator:alice", (state, verb, last)
            if verb == "mark-synced":
                assert (row.status, row.remote_id) == (denpyo.Status.SYNCED, "msg_found_by_hand")
            elif verb == "resend":
                assert ledger.store.find_superseding(sid) is not None, (state, row)
            elif verb == "abandon":
                assert row.resolution is not None and "operator:alice" in row.resolution
            else:
                assert last.kind == "retry" and row.next_attempt_at is not None, (state, last)


def test_a_viewer_signs_in_and_is_offered_no_action(
    served_people: tuple[str, denpyo.Ledger, dict[str, int], dict[str, str]],
    page: Any,
    tmp_path: Path,
) -> None:
    base, ledger, ids, tokens = served_people
    shots = Shots(tmp_path)
    sign_in(page, base, shots, "vera", tokens["vera"])
    assert page.locator("header.top .who .person").inner_text() == "vera"
    assert page.locator("header.top .who .role").inner_text() == "viewer"
    assert page.locator("table.rows tbody tr").count() == 4
    assert page.locator("input[name=ids]").count() == 0
    assert page.locator("button[name=action]").count() == 0
    page.goto(f"{base}/submissions/{ids['exhausted']}")
    assert page.locator("section.actions form").count() == 0
    assert "A viewer: no actions" in page.locator("section.actions").inner_text()
    page.goto(f"{base}/")
    assert page.locator("form[action$='/pause']").count() == 0
    shots.take(page, "11-viewer")
    assert [e.kind for e in ledger.events(ids["exhausted"])][-1] != "retry"


def test_an_operator_signs_in_and_retries_a_row(
    served_people: tuple[str, denpyo.Ledger, dict[str, int], dict[str, str]],
    page: Any,
    tmp_path: Path,
) -> None:
    base, ledger, ids, tokens = served_people
    shots = Shots(tmp_path)
    page.goto(f"{base}/login")
    page.fill("input[name=name]", "vera")  # another person's name: refused
    page.fill("input[name=token]", tokens["otto"])
    page.click("button[type=submit]")
    assert "wrong name or token" in page.locator(".flash.error").inner_text()
    sign_in(page, base, shots, "otto", tokens["otto"])
    assert page.locator("header.top .who .role").inner_text() == "operator"
    assert page.locator("input[name=ids]").count() == 4
    page.goto(f"{base}/submissions/{ids['exhausted']}")
    form = page.locator("form[action$='/retry']")
    form.locator("textarea[name=note]").fill("the provider is back")
    form.locator("button").click()
    page.wait_for_url("**done=retried**")
    assert "Done: retried" in page.locator(".flash.ok").inner_text()
    shots.take(page, "12-operator-retried")
    retried = ledger.get_by_id(ids["exhausted"])
    assert retried is not None and retried.next_attempt_at is not None
    assert [f"{e.kind} {e.actor}" for e in ledger.events(retried.id)][-1] == "retry operator:otto"
