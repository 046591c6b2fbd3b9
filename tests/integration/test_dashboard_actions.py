"""The dashboard's action log, two-person requests and bulk actions on a whole
filtered set: each role sees and does only its own; a request waits for another
person with the approver role; a bulk action runs from its dry run to its end and
its page says how far it is; the log exports as CSV."""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import denpyo
from dashboard_client import ORIGIN, sign_in
from dashboard_seed import CHANNEL, seed
from denpyo.domain.actions import ActionState, Approval
from denpyo.engine import people
from denpyo.errors import ConfigurationError
from denpyo.web import create_app

ROLES = {"vera": "viewer", "otto": "operator", "olga": "operator", "april": "approver"}


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(f"sqlite:///{tmp_path}/actions.db") as ledger:
        ledger.migrate()
        yield ledger


@pytest.fixture
def ids(ledger: denpyo.Ledger) -> dict[str, int]:
    return seed(ledger)


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    found = {}
    for name, role in ROLES.items():
        _, token = people.add(tmp_path / "users.json", name, role)
        assert token is not None
        found[name] = token
    return found


def app_of(ledger: denpyo.Ledger, tmp_path: Path, **options: Any) -> Any:
    return create_app(ledger, users=tmp_path / "users.json", **options)


def post(browser: TestClient, csrf: str, path: str, **data: str) -> Any:
    return browser.post(path, data={"csrf_token": csrf, **data}, headers={"origin": ORIGIN})


def action_id(answer: Any) -> int:
    assert answer.status_code == 303, answer.text
    found = re.search(r"/actions/(\d+)", answer.headers["location"])
    assert found, answer.headers["location"]
    return int(found.group(1))


def wait_for(ledger: denpyo.Ledger, number: int, state: ActionState) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        record = ledger.store.action(number)
        if record is not None and record.state is state:
            return record
        time.sleep(0.05)
    raise AssertionError(f"action #{number} never became {state}: {ledger.store.action(number)}")


def test_a_bulk_over_a_filter_from_dry_run_to_done(
    ledger: denpyo.Ledger, ids: dict[str, int], tokens: dict[str, str], tmp_path: Path
) -> None:
    app = app_of(ledger, tmp_path)
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    listing = otto.get("/submissions", params={"status": "rejected"}).text
    assert "Every row this filter finds" in listing
    number = action_id(
        post(otto, csrf, "/bulk/plan", status="rejected", action="abandon", note="closing")
    )
    page = otto.get(f"/actions/{number}").text
    assert "will abandon" in page and "Dry run ready" not in page
    assert ledger.store.action(number).state is ActionState.PLANNED  # type: ignore[union-attr]
    assert ledger.store.get(ids["rejected"]).resolution is None  # type: ignore[union-attr]
    action_id(post(otto, csrf, f"/actions/{number}/confirm"))
    done = wait_for(ledger, number, ActionState.DONE)
    assert (done.done, done.skipped, done.total) == (2, 0, 2)
    assert "abandoned by operator:otto" in (ledger.store.get(ids["rejected"]).resolution or "")  # type: ignore[union-attr]
    page = otto.get(f"/actions/{number}").text
    assert "2 done, 0 skipped of 2" in page and "<progress" in page


def test_a_viewer_sees_the_log_and_can_do_nothing(
    ledger: denpyo.Ledger, ids: dict[str, int], tokens: dict[str, str], tmp_path: Path
) -> None:
    app = app_of(ledger, tmp_path)
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    number = action_id(post(otto, csrf, "/bulk/plan", status="rejected", action="retry", note="n"))
    vera, vcsrf = sign_in(app, "vera", tokens["vera"])
    assert vera.get("/actions").status_code == 200
    page = vera.get(f"/actions/{number}").text
    assert "/confirm" not in page and "/do/cancel" not in page
    assert "Every row this filter finds" not in vera.get("/submissions?status=rejected").text
    for path in (f"/actions/{number}/confirm", f"/actions/{number}/do/cancel", "/bulk/plan"):
        assert post(vera, vcsrf, path, note="x", action="retry", status="failed").status_code == 403
    olga, ocsrf = sign_in(app, "olga", tokens["olga"])  # another operator: not hers
    assert post(olga, ocsrf, f"/actions/{number}/do/cancel").status_code == 403
    assert post(olga, ocsrf, f"/actions/{number}/confirm").status_code == 400
    assert ledger.store.action(number).state is ActionState.PLANNED  # type: ignore[union-attr]


def test_two_people_for_a_mark_synced(
    ledger: denpyo.Ledger, ids: dict[str, int], tokens: dict[str, str], tmp_path: Path
) -> None:
    app = app_of(ledger, tmp_path, approval=Approval())
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    answer = post(
        otto,
        csrf,
        f"/submissions/{ids['doubt']}/mark-synced",
        note="in the console",
        remote_id="msg-9",
    )
    number = action_id(answer)
    assert ledger.store.get(ids["doubt"]).status is denpyo.Status.FAILED  # type: ignore[union-attr]
    assert "Sent for approval" in otto.get(answer.headers["location"]).text
    assert "/approve" not in otto.get(f"/actions/{number}").text  # not for the one who asked
    olga, ocsrf = sign_in(app, "olga", tokens["olga"])  # an operator: not an approver
    assert post(olga, ocsrf, f"/actions/{number}/approve", note="ok").status_code == 403
    april, acsrf = sign_in(app, "april", tokens["april"])
    assert f"#{number}" in april.get("/approvals").text
    assert "/approve" in april.get(f"/actions/{number}").text
    action_id(post(april, acsrf, f"/actions/{number}/approve", note="seen it too"))
    sub = ledger.store.get(ids["doubt"])
    assert sub is not None and sub.status is denpyo.Status.SYNCED and sub.remote_id == "msg-9"
    last = ledger.events(ids["doubt"])[-1]
    assert last.actor == "operator:otto" and "approved by april" in (last.detail or "")
    log = april.get("/actions").text
    assert "april" in log and "mark_synced" in log


def test_the_log_exports_as_csv(
    ledger: denpyo.Ledger, ids: dict[str, int], tokens: dict[str, str], tmp_path: Path
) -> None:
    app = app_of(ledger, tmp_path)
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    post(otto, csrf, f"/submissions/{ids['exhausted']}/retry", note="=1+1 provider back")
    post(otto, csrf, "/channels/sms/pause", note="maintenance")
    answer = otto.get("/actions.csv", params={"by": "otto"})
    assert answer.headers["content-type"].startswith("text/csv")
    assert "attachment" in answer.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [(r["kind"], r["by"]) for r in rows] == [("pause", "otto"), ("retry", "otto")]
    assert rows[1]["note"] == "'=1+1 provider back"
    assert CHANNEL not in rows[0]["target"] and rows[0]["target"] == "channel sms"


def test_the_shared_token_is_never_the_second_person(
    ledger: denpyo.Ledger, ids: dict[str, int], tokens: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="sign in as themselves"):
        create_app(ledger, token="a-long-enough-token-1", approval=Approval())
    app = app_of(ledger, tmp_path, token="a-long-enough-token-1", approval=Approval())
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    number = action_id(
        post(otto, csrf, f"/submissions/{ids['doubt']}/mark-synced", note="n", remote_id="m")
    )
    typed, tcsrf = sign_in(app, "zed", "a-long-enough-token-1")  # an admin, name typed
    assert "/approve" not in typed.get(f"/actions/{number}").text
    refused = post(typed, tcsrf, f"/actions/{number}/approve", note="ok")
    assert refused.status_code == 403 and "not a second person" in refused.text
    assert ledger.store.action(number).state is ActionState.AWAITING_APPROVAL  # type: ignore[union-attr]


def test_bad_input_is_refused_and_writes_nothing(
    ledger: denpyo.Ledger, ids: dict[str, int], tokens: dict[str, str], tmp_path: Path
) -> None:
    app = app_of(ledger, tmp_path)
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    assert "no action #999" in otto.get("/actions/999").text
    assert otto.get("/actions/999").status_code == 400
    assert otto.get("/actions", params={"since": "yesterday-ish"}).status_code == 400
    assert otto.get("/actions", params={"kind": "explode"}).status_code == 400
    for fields in (
        {"status": "rejected", "action": "mark_synced", "note": "n"},  # not a bulk kind
        {"status": "rejected", "action": "retry", "note": " "},  # no note
        {"status": "nonsense", "action": "retry", "note": "n"},  # no such status
        {"error_text": "x" * 201, "action": "retry", "note": "n"},  # too long
        {"action": "abandon", "note": "everything"},  # no filter: every row of the table
    ):
        assert post(otto, csrf, "/bulk/plan", **fields).status_code == 400, fields
    number = action_id(post(otto, csrf, "/bulk/plan", status="rejected", action="retry", note="n"))
    assert post(otto, csrf, f"/actions/{number}/do/explode").status_code == 404
    assert post(otto, csrf, "/actions/999/confirm").status_code == 400
    assert [r.id for r in ledger.store.actions()] == [number]  # only the one dry run
