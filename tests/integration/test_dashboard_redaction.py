"""The dashboard shows rows through the ledger's redaction (and its own `redact=`
names): the payload, the last error, the history and the lists. An admin may see a
row whole with `?full=1`, which is logged with their name; anyone else is refused."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import denpyo
from dashboard_client import client, sign_in
from denpyo.engine import people
from denpyo.web import create_app

CARD = "4111111111111111"
ADDRESS = "1 Main Street"
ROLES = {"vera": "viewer", "otto": "operator", "ada": "admin"}


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(f"sqlite:///{tmp_path}/redaction.db") as ledger:
        ledger.migrate()
        yield ledger


@pytest.fixture
def row(ledger: denpyo.Ledger) -> int:
    """A row the provider rejected, quoting its card number."""

    @ledger.channel("pay", max_attempts=1)
    def send(sub: denpyo.Submission) -> str:
        raise denpyo.Rejected(f"402 card {sub.payload['cardNumber']} declined")

    with pytest.raises(denpyo.SubmissionRejected) as raised:
        ledger.submit("pay", "order-1", {"cardNumber": CARD, "address": ADDRESS, "amount": 5})
    return raised.value.submission.id


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    found = {}
    for name, role in ROLES.items():
        _, token = people.add(tmp_path / "users.json", name, role)
        assert token is not None
        found[name] = token
    return found


def test_a_row_and_the_lists_are_redacted_for_everyone(
    ledger: denpyo.Ledger, row: int, tokens: dict[str, str], tmp_path: Path
) -> None:
    app = create_app(ledger, users=tmp_path / "users.json", redact=["address"])
    for name in ROLES:
        browser, _ = sign_in(app, name, tokens[name])
        page = browser.get(f"/submissions/{row}").text
        assert CARD not in page and ADDRESS not in page, name
        assert "402 card [redacted] declined" in page
        assert ("Show full payload" in page) is (name == "ada")
        for listing in ("/submissions", "/attention", "/submissions?channel=pay&q=order"):
            assert CARD not in browser.get(listing).text, (name, listing)


def test_an_admin_sees_the_full_payload_and_it_is_logged(
    ledger: denpyo.Ledger,
    row: int,
    tokens: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(ledger, users=tmp_path / "users.json")
    admin, _ = sign_in(app, "ada", tokens["ada"])
    with caplog.at_level(logging.INFO, logger="denpyo.web"):
        page = admin.get(f"/submissions/{row}?full=1")
    assert page.status_code == 200
    assert CARD in page.text and "Shown in full" in page.text
    assert f"402 card {CARD} declined" in page.text
    [line] = [r.getMessage() for r in caplog.records if "full payload" in r.getMessage()]
    assert line == f"dashboard: full payload of #{row} (pay:order-1) shown to ada"
    by_bearer = client(app).get(
        f"/submissions/{row}?full=1", headers={"authorization": f"Bearer {tokens['ada']}"}
    )
    assert by_bearer.status_code == 200 and CARD in by_bearer.text


@pytest.mark.parametrize("name", ["vera", "otto"])
def test_anyone_but_an_admin_is_refused_the_full_payload(
    ledger: denpyo.Ledger,
    row: int,
    tokens: dict[str, str],
    tmp_path: Path,
    name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(ledger, users=tmp_path / "users.json")
    browser, _ = sign_in(app, name, tokens[name])
    with caplog.at_level(logging.INFO, logger="denpyo.web"):
        refused = browser.get(f"/submissions/{row}?full=1")
    assert refused.status_code == 403
    assert CARD not in refused.text and "only an admin" in refused.text
    assert "full payload of" not in caplog.text


def test_a_read_only_server_shows_no_one_the_full_payload(
    ledger: denpyo.Ledger, row: int, tokens: dict[str, str], tmp_path: Path
) -> None:
    app = create_app(ledger, users=tmp_path / "users.json", read_only=True)
    admin, _ = sign_in(app, "ada", tokens["ada"])
    assert "Show full payload" not in admin.get(f"/submissions/{row}").text
    assert admin.get(f"/submissions/{row}?full=1").status_code == 403


def test_the_dashboard_follows_the_ledgers_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`DENPYO_REDACT` where the ledger is opened, and a ledger's own `Redaction`."""
    monkeypatch.setenv("DENPYO_REDACT", "address")
    only = denpyo.Redaction.only("cardNumber")
    with denpyo.Ledger(f"sqlite:///{tmp_path}/rule.db", redact=only) as ledger:
        ledger.migrate()
        ledger.channel("pay")(lambda sub: "ok")
        sid = ledger.submit("pay", "k", {"cardNumber": CARD, "address": ADDRESS, "token": "t0k"}).id
        browser, _ = sign_in(
            create_app(ledger, token="correct-horse-battery"), "al", "correct-horse-battery"
        )
        page = browser.get(f"/submissions/{sid}").text
    assert CARD not in page and ADDRESS not in page and "t0k" in page


def test_a_resend_whose_edited_payload_still_holds_the_marker_is_refused(
    ledger: denpyo.Ledger, row: int, tokens: dict[str, str], tmp_path: Path
) -> None:
    """The hidden field kept its name: its value comes back. Renamed (or moved), its
    value is not known there, and the marker would go to the provider: refused."""
    from dashboard_client import ORIGIN

    app = create_app(ledger, users=tmp_path / "users.json")
    otto, csrf = sign_in(app, "otto", tokens["otto"])
    renamed = '{"card_number": "[redacted]", "cardNumber": "[redacted]", "amount": 6}'
    refused = otto.post(
        f"/submissions/{row}/resend",
        data={"payload": renamed, "note": "fixed amount", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert refused.status_code == 409 and "$.card_number" in refused.text
    assert "$.cardNumber" not in refused.text  # its value came back
    assert ledger.store.find_superseding(row) is None  # nothing sent, nothing written
    kept = '{"cardNumber": "[redacted]", "address": "1 Main Street", "amount": 6}'
    done = otto.post(
        f"/submissions/{row}/resend",
        data={"payload": kept, "note": "fixed amount", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert done.status_code == 303
    new = ledger.store.find_superseding(row)
    assert new is not None and new.payload == {"cardNumber": CARD, "address": ADDRESS, "amount": 6}
