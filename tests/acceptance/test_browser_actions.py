"""The action log, two-person requests and a bulk action over a whole filtered set,
in a real browser (Debian's Chromium driven by Playwright), as people on call use
them: two people, each in their own browser, for a request; a bulk retry of 10,000
rows on PostgreSQL watched to its end; the log and its CSV export.

Pages are photographed into the test's temporary directory, and into
docs/screenshots/ when DENPYO_SCREENSHOTS is set."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import denpyo
from browser import CHROMIUM, CHROMIUM_FLAGS, Shots, patient, serving
from dashboard_seed import seed
from denpyo.domain.actions import ActionState, Approval
from denpyo.engine import people
from denpyo.web import create_app

playwright_api = pytest.importorskip("playwright.sync_api")

PEOPLE = {"otto": "operator", "april": "approver"}
BULK_ROWS = 10_000


@pytest.fixture(params=["postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The bulk run is on PostgreSQL, as the people it is for run it."""
    return str(request.param)


def users_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "users.json"
    tokens = {}
    for name, role in PEOPLE.items():
        _, token = people.add(path, name, role)
        assert token is not None
        tokens[name] = token
    return path, tokens


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    with playwright_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def person(browser: Any, base: str, name: str, token: str) -> Any:
    """A browser of one's own (its own cookies), signed in: its page."""
    context = patient(
        browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    )
    page = context.new_page()
    page.goto(f"{base}/login")
    page.fill("input[name=name]", name)
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    return page


def test_two_people_for_a_mark_synced_then_the_log_and_its_export(
    tmp_path: Path, browser: Any
) -> None:
    shots = Shots(tmp_path)
    path, tokens = users_file(tmp_path)
    with denpyo.Ledger(f"sqlite:///{tmp_path}/two.db") as ledger:
        ledger.migrate()
        ids = seed(ledger, synced=5)
        app = create_app(ledger, users=path, approval=Approval(), refresh=2.0)
        with serving(app) as base:
            otto = person(browser, base, "otto", tokens["otto"])
            otto.goto(f"{base}/submissions/{ids['doubt']}")
            form = otto.locator("form.act", has=otto.locator("input[name=remote_id]"))
            form.locator("input[name=remote_id]").fill("msg_7781")
            form.locator("textarea[name=note]").fill("found it in the provider's console")
            form.locator("button[type=submit]").click()
            otto.wait_for_selector("text=Sent for approval")
            shots.take(otto, "20-request-sent")
            assert ledger.store.get(ids["doubt"]).status is denpyo.Status.FAILED  # type: ignore[union-attr]
            assert otto.locator("form[action$='/approve']").count() == 0  # not his to decide

            april = person(browser, base, "april", tokens["april"])
            april.goto(f"{base}/approvals")
            shots.take(april, "21-approvals")
            april.locator("table.rows a").first.click()
            decide = april.locator("form[action$='/approve']")
            decide.locator("textarea[name=note]").fill("checked it too: msg_7781 is there")
            decide.get_by_role("button", name="Approve").click()
            april.wait_for_selector("text=Approved.")
            shots.take(april, "22-request-approved")
            sub = ledger.store.get(ids["doubt"])
            assert sub is not None and sub.status is denpyo.Status.SYNCED
            last = ledger.events(sub.id)[-1]
            assert last.actor == "operator:otto" and "approved by april" in (last.detail or "")

            april.goto(f"{base}/actions")
            assert "mark_synced" in april.locator("table.rows").inner_text()
            shots.take(april, "23-action-log")
            with april.expect_download() as download:
                april.click("text=Export CSV")
            rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
            [request] = [r for r in rows if r["kind"] == "mark_synced"]
            assert (request["by"], request["approver"], request["state"]) == (
                "otto",
                "april",
                "done",
            )


def exhausted_rows(db_url: str, n: int) -> None:
    """`n` exhausted rows of channel `sms` (unresolved `failed`, no next attempt):
    recorded by the ledger, then failed in one statement, as an outage leaves them."""
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("sms")(lambda sub: "sms-1")
        for start in range(0, n, 2000):
            items = [(f"sms:{i}", {"to": f"+8190{i:07}"}) for i in range(start, start + 2000)]
            ledger.enqueue_many("sms", items)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'transient', "
            "last_error = '503 the provider is down', attempts = 5, next_attempt_at = NULL "
            "WHERE channel = 'sms'"
        )


def test_a_bulk_retry_of_ten_thousand_rows_with_its_progress(
    db_url: str, tmp_path: Path, browser: Any
) -> None:
    shots = Shots(tmp_path)
    path, tokens = users_file(tmp_path)
    exhausted_rows(db_url, BULK_ROWS)
    with (
        denpyo.Ledger(db_url) as ledger,
        serving(create_app(ledger, users=path, refresh=2.0)) as base,
    ):
        otto = person(browser, base, "otto", tokens["otto"])
        otto.goto(f"{base}/submissions?status=failed&channel=sms")
        bulk = otto.locator("form.bulkall")
        bulk.locator("select[name=action]").select_option("retry")
        bulk.locator("input[name=note]").fill("the SMS provider's outage INC-4411 is over")
        bulk.locator("button[type=submit]").click()
        otto.wait_for_selector(f"text={BULK_ROWS:,} will retry")
        shots.take(otto, "24-bulk-dry-run")
        [planned] = ledger.store.actions(limit=1)
        assert (planned.state, planned.total) == (ActionState.PLANNED, BULK_ROWS)
        otto.click("form[action$='/confirm'] button")
        otto.wait_for_selector("progress")
        shots.take(otto, "25-bulk-running")
        otto.wait_for_selector(
            f"text={BULK_ROWS:,} done, 0 skipped of {BULK_ROWS:,}", timeout=240_000
        )
        otto.reload()  # the progress is the database's: a reload shows the same
        assert f"{BULK_ROWS:,} done" in otto.locator("#action").inner_text()
        shots.take(otto, "26-bulk-done")
    with psycopg.connect(db_url) as conn:
        retries = conn.execute(
            "SELECT count(*), count(DISTINCT submission_id) FROM denpyo_events WHERE kind = 'retry'"
        ).fetchone()
        due = conn.execute(
            "SELECT count(*) FROM denpyo_submissions WHERE channel = 'sms' "
            "AND status = 'failed' AND next_attempt_at IS NOT NULL"
        ).fetchone()
    assert retries == (BULK_ROWS, BULK_ROWS)  # each row once
    assert due == (BULK_ROWS,)
