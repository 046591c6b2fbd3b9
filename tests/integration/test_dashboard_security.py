"""The dashboard refuses whoever it should, before anything is read or written: no
token, a wrong token, a POST without the CSRF token or from another origin, a
read-only viewer; and it escapes and redacts what it shows."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

import denpyo
from dashboard_client import csrf_of
from dashboard_seed import CARD, SCRIPT, seed
from denpyo.web import Access, create_app

TOKEN = "correct-horse-battery"
ORIGIN = "http://127.0.0.1:8470"
PAGES = [
    "/",
    "/partials/overview",
    "/submissions",
    "/submissions/1",
    "/attention",
    "/metrics",
    "/channels/sms",
]


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(f"sqlite:///{tmp_path}/dash.db") as ledger:
        ledger.migrate()
        yield ledger


@pytest.fixture
def ids(ledger: denpyo.Ledger) -> dict[str, int]:
    return seed(ledger)


def client(app: Any) -> TestClient:
    return TestClient(app, base_url=ORIGIN, follow_redirects=False)


def signed_in(ledger: denpyo.Ledger, **options: Any) -> tuple[TestClient, str]:
    """A browser that signed in with the token: its client and CSRF token."""
    browser = client(create_app(ledger, token=TOKEN, **options))
    page = browser.get("/login")
    csrf = csrf_of(page.text)
    answer = browser.post(
        "/login",
        data={"token": TOKEN, "name": "alice", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert answer.status_code == 303, answer.text
    return browser, csrf


def history(ledger: denpyo.Ledger, submission_id: int) -> list[str]:
    return [f"{e.kind} {e.actor}" for e in ledger.events(submission_id)]


def test_a_dashboard_without_a_token_or_an_auth_hook_is_never_made(
    ledger: denpyo.Ledger,
) -> None:
    with pytest.raises(denpyo.ConfigurationError):
        create_app(ledger)


@pytest.mark.parametrize("path", PAGES)
def test_without_a_token_nothing_is_shown(
    ledger: denpyo.Ledger, ids: dict[str, int], path: str
) -> None:
    anonymous = client(create_app(ledger, token=TOKEN))
    page = anonymous.get(path, headers={"accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"].startswith("/login")
    script = anonymous.get(path)
    assert script.status_code == 401 and script.headers["www-authenticate"].startswith("Bearer")
    assert "order:" not in script.text and "denpyo_rows" not in script.text
    wrong = anonymous.get(path, headers={"authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401


def test_a_wrong_token_signs_nobody_in(ledger: denpyo.Ledger, ids: dict[str, int]) -> None:
    browser = client(create_app(ledger, token=TOKEN))
    csrf = csrf_of(browser.get("/login").text)
    answer = browser.post(
        "/login",
        data={"token": TOKEN + "x", "name": "mallory", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert answer.status_code == 401 and "wrong token" in answer.text
    assert "denpyo_session" not in browser.cookies
    assert browser.get("/attention").status_code == 401
    forged = client(create_app(ledger, token=TOKEN))
    forged.cookies.set("denpyo_session", "eyJuIjogIm0iLCAiZSI6IDk5OTk5OTk5OTl9.00")
    assert forged.get("/attention").status_code == 401


def test_a_session_cookie_is_httponly_and_strict(ledger: denpyo.Ledger) -> None:
    browser = client(create_app(ledger, token=TOKEN))
    csrf = csrf_of(browser.get("/login").text)
    answer = browser.post(
        "/login",
        data={"token": TOKEN, "name": "alice", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert "default-src 'self'" in answer.headers["content-security-policy"]


def test_a_bearer_token_lets_a_script_in(ledger: denpyo.Ledger, ids: dict[str, int]) -> None:
    script = client(create_app(ledger, token=TOKEN))
    metrics = script.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert metrics.status_code == 200 and "denpyo_rows{" in metrics.text


POSTS: list[tuple[str, str, dict[str, str]]] = [
    ("retry", "/submissions/{exhausted}/retry", {"note": "outage over"}),
    ("abandon", "/submissions/{rejected}/abandon", {"note": "gone"}),
    ("resend", "/submissions/{rejected}/resend", {"note": "fixed"}),
    ("mark-synced", "/submissions/{doubt}/mark-synced", {"note": "seen", "remote_id": "m-1"}),
    ("bulk", "/bulk", {"note": "all", "action": "abandon", "confirm": "yes", "ids": "{rejected}"}),
]


@pytest.mark.parametrize(("verb", "path", "form"), POSTS, ids=[p[0] for p in POSTS])
def test_posts_without_the_csrf_token_or_from_elsewhere_write_nothing(
    ledger: denpyo.Ledger,
    ids: dict[str, int],
    verb: str,
    path: str,
    form: dict[str, str],
) -> None:
    browser, csrf = signed_in(ledger)
    before = {name: history(ledger, i) for name, i in ids.items()}
    target = path.format(**ids)
    form = {name: value.format(**ids) for name, value in form.items()}
    refusals = [
        (dict(form), {"origin": ORIGIN}),  # no CSRF token
        ({**form, "csrf_token": "forged"}, {"origin": ORIGIN}),  # a wrong one
        ({**form, "csrf_token": csrf}, {"origin": "https://evil.example"}),  # another origin
        ({**form, "csrf_token": csrf}, {"referer": "https://evil.example/page"}),
        ({**form, "csrf_token": csrf}, {"origin": ORIGIN, "sec-fetch-site": "cross-site"}),
    ]
    for data, headers in refusals:
        answer = browser.post(target, data=data, headers=headers)
        assert answer.status_code == 403, (data, headers, answer.text)
    anonymous = client(create_app(ledger, token=TOKEN))
    assert anonymous.post(target, data={**form, "csrf_token": csrf}).status_code == 401
    assert {name: history(ledger, i) for name, i in ids.items()} == before
    # The same POST from the page, with its token, is let through.
    done = browser.post(target, data={**form, "csrf_token": csrf}, headers={"origin": ORIGIN})
    assert done.status_code in (200, 303), done.text
    assert {name: history(ledger, i) for name, i in ids.items()} != before


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_channel_pause_or_resume_needs_the_csrf_token_and_this_origin(
    ledger: denpyo.Ledger, ids: dict[str, int], verb: str
) -> None:
    if verb == "resume":
        ledger.pause("sms", note="carrier outage", by="bob")
    browser, csrf = signed_in(ledger)
    before = ledger.store.channel_history("sms")
    form = {"note": "maintenance"}
    refusals = [
        (dict(form), {"origin": ORIGIN}),
        ({**form, "csrf_token": "forged"}, {"origin": ORIGIN}),
        ({**form, "csrf_token": csrf}, {"origin": "https://evil.example"}),
        ({**form, "csrf_token": csrf}, {"referer": "https://evil.example/page"}),
        ({**form, "csrf_token": csrf}, {"origin": ORIGIN, "sec-fetch-site": "cross-site"}),
    ]
    target = f"/channels/sms/{verb}"
    for data, headers in refusals:
        answer = browser.post(target, data=data, headers=headers)
        assert answer.status_code == 403, (data, headers, answer.text)
    anonymous = client(create_app(ledger, token=TOKEN))
    assert anonymous.post(target, data={**form, "csrf_token": csrf}).status_code == 401
    reader, reader_csrf = signed_in(ledger, read_only=True)
    page = reader.get("/").text
    assert "/channels/sms/" not in page and "read-only" in page
    assert "/channels/sms/" not in reader.get("/channels/sms").text
    refused = reader.post(
        target, data={**form, "csrf_token": reader_csrf}, headers={"origin": ORIGIN}
    )
    assert refused.status_code == 403
    assert ledger.store.channel_history("sms") == before
    # The form of the overview, with its token, from this origin, is let through.
    overview = browser.get("/").text
    assert f'action="{target}"' in overview
    done = browser.post(target, data={**form, "csrf_token": csrf}, headers={"origin": ORIGIN})
    assert done.status_code == 303 and done.headers["location"].startswith("/channels/sms?done=")
    [latest, *_] = ledger.store.channel_history("sms")
    assert (latest.actor, latest.note) == ("operator:alice", "maintenance")


def test_read_only_hides_the_actions_and_refuses_them(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    browser, csrf = signed_in(ledger, read_only=True)
    page = browser.get(f"/submissions/{ids['rejected']}")
    assert page.status_code == 200 and "read-only" in page.text
    assert "/abandon" not in page.text and 'name="ids"' not in browser.get("/attention").text
    before = history(ledger, ids["rejected"])
    for verb in ("retry", "abandon", "resend", "mark-synced"):
        answer = browser.post(
            f"/submissions/{ids['rejected']}/{verb}",
            data={"note": "n", "remote_id": "r", "csrf_token": csrf},
            headers={"origin": ORIGIN},
        )
        assert answer.status_code == 403
    assert history(ledger, ids["rejected"]) == before


def test_the_host_apps_auth_hook_decides(ledger: denpyo.Ledger, ids: dict[str, int]) -> None:
    def auth(request: Any) -> Access | None:
        user = request.headers.get("x-user")
        if user == "admin":
            return Access.admin("ada")
        return Access.read_only("rita") if user == "reader" else None

    app = create_app(ledger, auth=auth)
    assert client(app).get("/attention").status_code == 401
    reader = client(app)
    reader.headers["x-user"] = "reader"
    csrf = csrf_of(reader.get("/attention").text)
    refused = reader.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": "n", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert refused.status_code == 403
    admin = client(app)
    admin.headers["x-user"] = "admin"
    csrf = csrf_of(admin.get("/attention").text)
    done = admin.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": "wrong address", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert done.status_code == 303
    after = ledger.get_by_id(ids["rejected"])
    assert after is not None and after.resolution == "abandoned by operator:ada: wrong address"


def test_a_payload_is_escaped_and_its_named_fields_redacted(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    browser, csrf = signed_in(ledger, redact=("card_number",))
    page = browser.get(f"/submissions/{ids['secret']}").text
    assert SCRIPT not in page and "&lt;script&gt;" in page
    assert CARD not in page and "[redacted]" in page
    listing = browser.get("/submissions?channel=invoice-email&q=order:42").text
    assert SCRIPT not in listing and CARD not in listing
    # A resend from the redacted view keeps the hidden value, and changes the rest.
    page = browser.get(f"/submissions/{ids['rejected']}").text
    assert CARD not in page
    edited = page.split('name="payload"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    edited = html.unescape(edited).replace('"amount": 100', '"amount": 101')
    answer = browser.post(
        f"/submissions/{ids['rejected']}/resend",
        data={"note": "amount fixed", "payload": edited, "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert answer.status_code == 303, answer.text
    resend = ledger.store.find_superseding(ids["rejected"])
    assert resend is not None and resend.payload["card_number"] == CARD
    assert resend.payload["amount"] == 101


def test_an_action_keeps_the_persons_name_and_note(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    browser, csrf = signed_in(ledger)
    missing = browser.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": " ", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert missing.status_code == 409 and "a note" in missing.text
    assert history(ledger, ids["rejected"])[-1].startswith("settle")
    done = browser.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": "address wrong", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert done.status_code == 303
    assert history(ledger, ids["rejected"])[-1] == "abandon operator:alice"
    [event] = [e for e in ledger.events(ids["rejected"]) if e.kind == "abandon"]
    assert event.detail == "address wrong"


BEARER = {"authorization": f"Bearer {TOKEN}"}
SECURITY = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def test_every_answer_carries_the_security_headers(ledger: denpyo.Ledger) -> None:
    """A page, a static file, Starlette's own 404 and 405, and a 500: the headers come
    from one place, whoever made the answer."""

    async def boom(request: Any) -> Any:
        raise RuntimeError("a bug in a page")

    app = create_app(ledger, token=TOKEN)
    app.router.routes.append(Route("/boom", boom))
    browser = TestClient(app, base_url=ORIGIN, raise_server_exceptions=False)
    answers = {
        "page": (browser.get("/login"), 200),
        "static": (browser.get("/static/denpyo.css"), 200),
        "404": (browser.get("/no-such-page"), 404),
        "405": (browser.get("/bulk"), 405),
        "400": (browser.get("/submissions?status=bogus", headers=BEARER), 400),
        "500": (browser.get("/boom"), 500),
    }
    for what, (answer, status) in answers.items():
        assert answer.status_code == status, (what, answer.text)
        for name, value in SECURITY.items():
            assert answer.headers.get(name) == value, (what, name, answer.headers)
        csp = answer.headers.get("content-security-policy", "")
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, what
        assert answer.headers["cache-control"] == ("no-cache" if what == "static" else "no-store")
    assert "POST" in answers["405"][0].headers["allow"]
    failed = answers["500"][0]
    assert 'class="flash error"' in failed.text and "a bug in a page" not in failed.text


def test_a_session_cookie_with_a_signature_of_any_bytes_signs_nobody_in(
    ledger: denpyo.Ledger,
) -> None:
    """The signature is compared as bytes: text outside ASCII is no signature, and no
    error."""
    anonymous = client(create_app(ledger, token=TOKEN))
    cookie = {b"cookie": b"denpyo_session=eyJuIjogIm0iLCAiZSI6IDk5OTk5OTk5OTl9.\xc3\xa9\xff"}
    assert anonymous.get("/attention", headers=cookie).status_code == 401
    page = anonymous.get("/", headers={**cookie, b"accept": b"text/html"})
    assert page.status_code == 303 and page.headers["location"].startswith("/login")


def test_the_done_flash_shows_only_the_known_outcomes(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    browser, csrf = signed_in(ledger)
    row = f"/submissions/{ids['rejected']}"
    lure = "Your session expired, sign in again at http://evil.example/login"
    for done in (lure, "abandoned!", "<b>x</b>"):
        page = browser.get(row, params={"done": done})
        assert page.status_code == 200
        assert "evil.example" not in page.text and 'class="flash ok"' not in page.text
    assert "Done: abandoned." in browser.get(row, params={"done": "abandoned"}).text
    resent = browser.post(
        f"{row}/resend", data={"note": "fixed", "csrf_token": csrf}, headers={"origin": ORIGIN}
    )
    assert resent.status_code == 303 and resent.headers["location"].endswith("?done=resent")
    shown = browser.get(resent.headers["location"]).text
    assert f"Done: created as the resend of #{ids['rejected']}." in shown


def test_a_host_it_is_not_served_as_is_refused_and_cannot_carry_a_matching_origin(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    """A page under another name (DNS rebinding: evil.example resolves to this
    server) sends Host and Origin alike; the Host is checked first, so the origin
    check compares with a Host the dashboard is really served as."""
    app = create_app(ledger, token=TOKEN, allowed_hosts=["ops.example.com"])
    before = ledger.store.channel_history("sms")
    for base in ("http://evil.example:8470", "http://ops.example.com.evil.example"):
        forged = TestClient(app, base_url=base, follow_redirects=False)
        assert forged.get("/login").status_code == 400
        answer = forged.post(
            "/channels/sms/pause",
            data={"note": "n", "csrf_token": "x"},
            headers={"origin": base, "authorization": f"Bearer {TOKEN}"},
        )
        assert answer.status_code == 400 and "not served as" in answer.text
    assert ledger.store.channel_history("sms") == before
    for base in (
        "http://ops.example.com:8470",
        "http://OPS.example.com",
        ORIGIN,
        "http://[::1]:8470",
        "http://localhost:8470",
    ):
        assert TestClient(app, base_url=base).get("/login").status_code == 200, base
    # Without allowed_hosts (mounted in an app that checks the Host), any Host.
    anywhere = TestClient(create_app(ledger, token=TOKEN), base_url="http://evil.example")
    assert anywhere.get("/login").status_code == 200


def test_the_command_line_serves_its_own_address_and_the_names_given() -> None:
    import socket

    from denpyo.cli.commands import served_as

    assert served_as("10.1.2.3", ("ops.example.com",)) == ["ops.example.com", "10.1.2.3"]
    assert socket.gethostname() in served_as("0.0.0.0", ())
