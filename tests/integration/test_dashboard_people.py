"""People on the dashboard, each with their own sign-in and role: what each role may
see and do, the users file's tokens by the form and by Bearer, a person removed or
demoted while signed in, sessions kept on the server (signed out, they are gone; a
read-only server's do not work on another), a proxy's header believed only from
its addresses, and wrong tokens slowed and logged."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import denpyo
from dashboard_client import ORIGIN, FakeTime, client, csrf_of, sign_in
from dashboard_seed import seed
from denpyo.engine import operator as op
from denpyo.engine import people
from denpyo.web import Access, create_app
from denpyo.web.auth import MAKE_TOKEN, Throttle

TOKEN = "correct-horse-battery"
PAGES = ["/", "/partials/overview", "/submissions", "/attention", "/metrics", "/channels/sms"]
ROLES = {"vera": "viewer", "otto": "operator", "april": "approver", "ada": "admin"}


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(f"sqlite:///{tmp_path}/people.db") as ledger:
        ledger.migrate()
        yield ledger


@pytest.fixture
def ids(ledger: denpyo.Ledger) -> dict[str, int]:
    return seed(ledger)


@pytest.fixture
def users(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A users file with one person of each role: its path, and their tokens."""
    path = tmp_path / "users.json"
    tokens = {}
    for name, role in ROLES.items():
        _, token = people.add(path, name, role)
        assert token is not None
        tokens[name] = token
    people.add(path, "petra", "operator", token=False)  # signed in by the proxy only
    return path, tokens


def login(browser: Any, csrf: str, name: str, token: str) -> Any:
    """The sign-in form sent from its page: the answer."""
    return browser.post(
        "/login",
        data={"name": name, "token": token, "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )


def fake_clock(app: Any) -> FakeTime:
    """The throttle's clock, moved by the test (no back-off is waited for)."""
    fake = FakeTime()
    app.state.dashboard.gate.throttle = Throttle(clock=fake.clock)
    return fake


def history(ledger: denpyo.Ledger, submission_id: int) -> list[str]:
    return [f"{e.kind} {e.actor}" for e in ledger.events(submission_id)]


def everything(ledger: denpyo.Ledger, ids: dict[str, int]) -> Any:
    return {n: history(ledger, i) for n, i in ids.items()}, ledger.store.channel_history("sms")


POSTS: list[tuple[str, dict[str, str]]] = [
    ("/submissions/{exhausted}/retry", {"note": "outage over"}),
    ("/submissions/{rejected}/abandon", {"note": "gone"}),
    ("/submissions/{rejected}/resend", {"note": "fixed"}),
    ("/submissions/{doubt}/mark-synced", {"note": "seen", "remote_id": "m-1"}),
    ("/bulk", {"note": "all", "action": "abandon", "confirm": "yes", "ids": "{rejected}"}),
    ("/channels/sms/pause", {"note": "maintenance"}),
    ("/channels/sms/resume", {"note": "back"}),
]


def test_every_role_reads_every_page_and_sees_its_name_and_role(
    ledger: denpyo.Ledger, ids: dict[str, int], users: tuple[Path, dict[str, str]]
) -> None:
    path, tokens = users
    script = client(create_app(ledger, users=path))
    for name, role in ROLES.items():
        bearer = {"authorization": f"Bearer {tokens[name]}"}
        for page in PAGES:
            assert script.get(page, headers=bearer).status_code == 200, (name, page)
        header = script.get("/", headers=bearer).text.split("</header>")[0]
        assert f'<span class="person">{name}</span>' in header
        assert f">{role}</span>" in header


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_viewer_is_refused_every_action_whatever_the_server(
    ledger: denpyo.Ledger, ids: dict[str, int], users: tuple[Path, dict[str, str]], read_only: bool
) -> None:
    path, tokens = users
    app = create_app(ledger, users=path, read_only=read_only)
    browser, csrf = sign_in(app, "vera", tokens["vera"])
    assert 'name="ids"' not in browser.get("/attention").text
    assert "/abandon" not in browser.get(f"/submissions/{ids['rejected']}").text
    before = everything(ledger, ids)
    for target, form in POSTS:
        data = {k: v.format(**ids) for k, v in {**form, "csrf_token": csrf}.items()}
        answer = browser.post(target.format(**ids), data=data, headers={"origin": ORIGIN})
        assert answer.status_code == 403, (target, answer.text)
        by_bearer = client(app).post(
            target.format(**ids), data=data, headers={"authorization": f"Bearer {tokens['vera']}"}
        )
        assert by_bearer.status_code == 403, target
    assert everything(ledger, ids) == before


def test_an_operator_acts_under_their_own_name(
    ledger: denpyo.Ledger, ids: dict[str, int], users: tuple[Path, dict[str, str]]
) -> None:
    path, tokens = users
    app = create_app(ledger, users=path)
    browser, csrf = sign_in(app, "otto", tokens["otto"])
    assert 'name="ids"' in browser.get("/attention").text
    for target, form in POSTS[:2] + POSTS[5:6]:
        data = {k: v.format(**ids) for k, v in {**form, "csrf_token": csrf}.items()}
        answer = browser.post(target.format(**ids), data=data, headers={"origin": ORIGIN})
        assert answer.status_code == 303, (target, answer.text)
    assert history(ledger, ids["rejected"])[-1] == "abandon operator:otto"
    assert history(ledger, ids["exhausted"])[-1] == "retry operator:otto"
    assert ledger.store.channel_history("sms")[0].actor == "operator:otto"
    # By Bearer, the person is the token's, whatever X-Denpyo-By says.
    done = client(app).post(
        f"/submissions/{ids['rejected2']}/abandon",
        data={"note": "closed"},
        headers={"authorization": f"Bearer {tokens['ada']}", "x-denpyo-by": "someone-else"},
    )
    assert done.status_code == 303
    assert history(ledger, ids["rejected2"])[-1] == "abandon operator:ada"


def test_the_form_wants_the_tokens_own_name(
    ledger: denpyo.Ledger, users: tuple[Path, dict[str, str]]
) -> None:
    path, tokens = users
    app = create_app(ledger, users=path)
    fake = fake_clock(app)
    browser = client(app)
    page = browser.get("/login").text
    assert "Your token" in page and "denpyo users add" in page
    csrf = csrf_of(page)
    for name, token in (("vera", tokens["otto"]), ("otto", tokens["otto"] + "x"), ("otto", "")):
        answer = login(browser, csrf, name, token)
        assert answer.status_code == 401 and "wrong name or token" in answer.text
        assert "denpyo_session" not in browser.cookies
        fake.now += 4  # past each back-off
    answer = login(browser, csrf, " OTTO ", tokens["otto"])
    assert answer.status_code == 303
    assert '<span class="person">otto</span>' in browser.get("/").text


def test_a_person_removed_or_given_a_new_token_is_refused_at_the_next_request(
    ledger: denpyo.Ledger, users: tuple[Path, dict[str, str]]
) -> None:
    path, tokens = users
    app = create_app(ledger, users=path)
    fake = fake_clock(app)
    otto, _ = sign_in(app, "otto", tokens["otto"])
    april, _ = sign_in(app, "april", tokens["april"])
    script = client(app)
    bearer = {"authorization": f"Bearer {tokens['otto']}"}
    assert otto.get("/attention").status_code == 200
    assert script.get("/attention", headers=bearer).status_code == 200  # and remembered
    people.remove(path, "otto")
    assert otto.get("/attention").status_code == 401
    assert script.get("/attention", headers=bearer).status_code == 401
    assert otto.get("/", headers={"accept": "text/html"}).headers["location"].startswith("/login")
    assert april.get("/attention").status_code == 200
    _, new = people.reset(path, "april")
    assert april.get("/attention").status_code == 401  # a reset ends the old sessions
    fake.now += 1  # the back-off of otto's refused token
    assert client(app).get("/attention", headers={"authorization": f"Bearer {new}"}).is_success


def test_a_demoted_persons_session_loses_the_right_at_once(
    ledger: denpyo.Ledger, ids: dict[str, int], users: tuple[Path, dict[str, str]]
) -> None:
    path, tokens = users
    app = create_app(ledger, users=path)
    browser, csrf = sign_in(app, "otto", tokens["otto"])
    people.set_role(path, "otto", "viewer")
    page = browser.get(f"/submissions/{ids['rejected']}").text
    assert ">viewer</span>" in page and "/abandon" not in page
    refused = browser.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": "gone", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert refused.status_code == 403
    people.set_role(path, "otto", "operator")
    done = browser.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": "gone", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert done.status_code == 303


def test_a_signed_out_cookie_replayed_is_refused(
    ledger: denpyo.Ledger, users: tuple[Path, dict[str, str]]
) -> None:
    path, tokens = users
    app = create_app(ledger, users=path, token=TOKEN)
    for name, token in (("otto", tokens["otto"]), ("tina", TOKEN)):
        browser, csrf = sign_in(app, name, token)
        cookie = browser.cookies["denpyo_session"]
        assert browser.get("/attention").status_code == 200
        out = browser.post("/logout", data={"csrf_token": csrf}, headers={"origin": ORIGIN})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        replay = client(app)
        replay.cookies.set("denpyo_session", cookie)
        assert replay.get("/attention").status_code == 401, name
        assert replay.post("/logout", data={"csrf_token": csrf}).status_code == 401


@pytest.mark.parametrize("shared_key", [True, False], ids=["same-key", "own-keys"])
def test_a_read_only_servers_session_cannot_act_on_a_read_write_one(
    ledger: denpyo.Ledger, ids: dict[str, int], users: tuple[Path, dict[str, str]], shared_key: bool
) -> None:
    """The same host, another port: the browser sends the read-only dashboard's cookie
    to the read-write one too. It is no session there."""
    path, tokens = users
    key = b"k" * 32
    reader = create_app(ledger, token=TOKEN, users=path, read_only=True, session_key=key)
    writer = create_app(
        ledger, token=TOKEN, users=path, session_key=key if shared_key else b"w" * 32
    )
    writer_origin = "http://127.0.0.1:8471"
    before = everything(ledger, ids)
    for name, token in (("tina", TOKEN), ("ada", tokens["ada"])):
        browser, csrf = sign_in(reader, name, token)
        page = browser.get(f"/submissions/{ids['rejected']}").text
        assert ">viewer</span>" in page and "read-only" in page and "/abandon" not in page
        refused = browser.post(
            f"/submissions/{ids['rejected']}/abandon",
            data={"note": "gone", "csrf_token": csrf},
            headers={"origin": ORIGIN},
        )
        assert refused.status_code == 403
        other = client(writer, writer_origin)
        other.cookies.set("denpyo_session", browser.cookies["denpyo_session"])
        other_csrf = csrf_of(other.get("/login").text)
        for target, form in POSTS:
            data = {k: v.format(**ids) for k, v in {**form, "csrf_token": other_csrf}.items()}
            answer = other.post(target.format(**ids), data=data, headers={"origin": writer_origin})
            assert answer.status_code == 401, (name, target)
        assert other.get("/attention").status_code == 401
    assert everything(ledger, ids) == before


def test_a_proxys_header_names_the_person_only_from_a_trusted_address(
    ledger: denpyo.Ledger,
    ids: dict[str, int],
    users: tuple[Path, dict[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path, _ = users
    app = create_app(
        ledger,
        users=path,
        trusted_header="X-Forwarded-User",
        trusted_proxies=["10.0.0.0/8", "127.0.0.1"],
    )
    for peer in ("10.20.30.40", "127.0.0.1", "::ffff:10.0.0.1"):
        proxied = client(app, peer=peer)
        proxied.headers["x-forwarded-user"] = "petra"  # in the file: an operator
        page = proxied.get("/attention")
        assert page.status_code == 200 and ">operator</span>" in page.text, peer
    csrf = csrf_of(page.text)
    done = proxied.post(
        f"/submissions/{ids['rejected']}/abandon",
        data={"note": "gone", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert done.status_code == 303
    assert history(ledger, ids["rejected"])[-1] == "abandon operator:petra"
    # Someone the file does not list: the proxy role, a viewer.
    stranger = client(app, peer="10.0.0.9")
    stranger.headers["x-forwarded-user"] = "sam"
    page = stranger.get("/attention")
    assert page.status_code == 200 and ">viewer</span>" in page.text
    refused = stranger.post(
        f"/submissions/{ids['rejected2']}/abandon",
        data={"note": "gone", "csrf_token": csrf_of(page.text)},
        headers={"origin": ORIGIN},
    )
    assert refused.status_code == 403
    # From anywhere else the header is nobody, and said once per source.
    with caplog.at_level(logging.WARNING, logger="denpyo.web"):
        for peer in ("192.168.1.5", "192.168.1.5", "11.0.0.1", "testclient"):
            outsider = client(app, peer=peer)
            outsider.headers["x-forwarded-user"] = "ada"
            assert outsider.get("/attention").status_code == 401
    warned = [r.getMessage() for r in caplog.records if "no trusted proxy" in r.getMessage()]
    assert len(warned) == 3 and "192.168.1.5" in warned[0]
    assert client(app).get("/login").status_code == 200  # users sign in by the form too


def test_a_proxy_named_person_in_other_capitals_is_not_a_second_person(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    """`bob` asks, `BOB` (the same person, as the sign-in compares names) may not
    approve: the request waits for someone else."""
    app = create_app(
        ledger,
        trusted_header="X-Forwarded-User",
        trusted_proxies=["127.0.0.1"],
        proxy_role="approver",
        approval=denpyo.Approval(),
    )

    def person(name: str) -> tuple[Any, str]:
        proxied = client(app, peer="127.0.0.1")
        proxied.headers["x-forwarded-user"] = name
        return proxied, csrf_of(proxied.get("/attention").text)

    bob, csrf = person("bob")
    asked = bob.post(
        f"/submissions/{ids['doubt']}/mark-synced",
        data={"note": "seen", "remote_id": "m-1", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert asked.status_code == 303 and "done=awaiting_approval" in asked.headers["location"]
    number = asked.headers["location"].split("/actions/")[1].split("?")[0]
    big_bob, csrf = person("BOB")
    assert "/approve" not in big_bob.get(f"/actions/{number}").text
    refused = big_bob.post(
        f"/actions/{number}/approve",
        data={"note": "ok", "csrf_token": csrf},
        headers={"origin": ORIGIN},
    )
    assert refused.status_code == 400 and "second person" in refused.text
    assert ledger.store.action(int(number)).state.value == "awaiting_approval"  # type: ignore[union-attr]


def test_the_proxy_role_and_a_proxy_alone(ledger: denpyo.Ledger, ids: dict[str, int]) -> None:
    app = create_app(
        ledger, trusted_header="X-Remote-User", trusted_proxies=["::1"], proxy_role="operator"
    )
    proxied = client(app, peer="::1")
    proxied.headers["x-remote-user"] = "olga"
    page = proxied.get("/attention")
    assert page.status_code == 200 and ">operator</span>" in page.text
    assert client(app, peer="::1").get("/login").status_code == 404  # no form to sign in by
    assert client(app, peer="::2").get("/attention").status_code == 401


def test_guessing_bearer_tokens_is_slowed_and_logged(
    ledger: denpyo.Ledger, users: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    path, tokens = users
    app = create_app(ledger, token=TOKEN, users=path)
    fake = fake_clock(app)
    script = client(app, peer="198.51.100.7")
    guesses = [TOKEN + "x", "dpy_" + tokens["otto"][4:-1] + "?", "nothing", ""]
    with caplog.at_level(logging.WARNING, logger="denpyo.web"):
        for i, guess in enumerate(guesses):
            # A wrong Bearer is a 401, even for a browser-like request: never a redirect.
            answer = script.get(
                "/", headers={"authorization": f"Bearer {guess}", "accept": "text/html"}
            )
            assert answer.status_code == 401
            fake.now += 2**i  # each back-off waited out
    lines = [r.getMessage() for r in caplog.records if r.name == "denpyo.web"]
    assert len(lines) == 4 and all("(bearer) from 198.51.100.7" in line for line in lines)
    assert [re.search(r"(\d+) in a row", line).group(1) for line in lines] == ["1", "2", "3", "4"]  # type: ignore[union-attr]
    assert "the next checked in 4 s" in lines[-1]
    # Another source was never slowed.
    other = client(app, peer="198.51.100.8").get("/", headers={"authorization": "Bearer wrong"})
    assert other.status_code == 401


def test_during_a_back_off_a_guess_is_answered_at_once_with_when_to_come_back(
    ledger: denpyo.Ledger, users: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    """Four wrong tokens from one address: the next guess is not checked, and is told
    at once (429, Retry-After) rather than held; a person's token that signed in a
    moment ago, and a browser that signed in here before, are let in meanwhile, and
    their successes do not end the back-off."""
    path, tokens = users
    app = create_app(ledger, token=TOKEN, users=path)
    fake = fake_clock(app)
    otto = {"authorization": f"Bearer {tokens['otto']}"}
    assert client(app, peer="198.51.100.7").get("/metrics", headers=otto).is_success
    carol = client(app, peer="198.51.100.7")  # signed in here before, and out again
    carol_csrf = csrf_of(carol.get("/login").text)
    assert login(carol, carol_csrf, "carol", TOKEN).status_code == 303
    carol.post("/logout", data={"csrf_token": carol_csrf}, headers={"origin": ORIGIN})
    assert "denpyo_session" not in carol.cookies and "denpyo_device" in carol.cookies
    guesser = client(app, peer="198.51.100.7")
    for i in range(4):
        guess = guesser.get("/metrics", headers={"authorization": f"Bearer no-{i}"})
        assert guess.status_code == 401
        fake.now += 2**i
    with caplog.at_level(logging.WARNING, logger="denpyo.web"):
        guesser.get("/metrics", headers={"authorization": "Bearer no-4"})
    fake.now += 0.3  # back-off: 8 s
    for credential in ("Bearer no-5", f"Bearer {TOKEN}"):  # the right shared token waits too
        refused = guesser.get("/metrics", headers={"authorization": credential})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "8"
        assert "try again in 8 s" in refused.text
    assert app.state.dashboard.gate.throttle.in_a_row("198.51.100.7") == 5  # not counted
    # A token proven a moment ago is answered at once, and ends nobody's back-off.
    assert client(app, peer="198.51.100.7").get("/metrics", headers=otto).is_success
    assert guesser.get("/metrics", headers={"authorization": "Bearer no-6"}).status_code == 429
    # The sign-in page says why.
    browser = client(app, peer="198.51.100.7")
    csrf = csrf_of(browser.get("/login").text)
    page = login(browser, csrf, "mallory", TOKEN)
    assert page.status_code == 429 and page.headers["retry-after"] == "8"
    assert "too many wrong tokens from your address: try again in 8 s" in page.text
    assert login(browser, csrf, "otto", tokens["otto"]).status_code == 303  # remembered
    # A browser that signed in here before has a back-off of its own: in at once.
    for mistyped in ("mistyped", "mistyped again"):
        assert login(carol, carol_csrf, "carol", mistyped).status_code == 401
    assert login(carol, carol_csrf, "carol", TOKEN).status_code == 429  # its own 1 s
    fake.now += 1
    assert login(carol, carol_csrf, "carol", TOKEN).status_code == 303
    assert app.state.dashboard.gate.throttle.in_a_row("198.51.100.7") == 5
    fake.now += 7
    assert guesser.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"}).is_success


def test_parallel_guesses_from_one_source_are_checked_one_after_the_other(
    ledger: denpyo.Ledger,
) -> None:
    """Three wrong tokens sent at once: they are checked in turn, the first two (the
    first mistake is free) and the third finds the back-off they started: 429 at
    once. Guessing in parallel is no faster, and nothing is held."""
    app = create_app(ledger, token=TOKEN)
    fake_clock(app)  # however slow the machine, no back-off ends meanwhile

    async def guess_at_once() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("192.0.2.1", 4000))
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
            answers = await asyncio.gather(
                *(http.get("/metrics", headers={"authorization": "Bearer no"}) for _ in range(3))
            )
        return sorted(a.status_code for a in answers)

    assert asyncio.run(guess_at_once()) == [401, 401, 429]
    assert app.state.dashboard.gate.throttle.in_a_row("192.0.2.1") == 2


def test_a_wrong_form_sign_in_is_answered_at_once_and_logged(
    ledger: denpyo.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(ledger, token=TOKEN)
    fake_clock(app)
    browser = client(app)
    csrf = csrf_of(browser.get("/login").text)
    with caplog.at_level(logging.WARNING, logger="denpyo.web"):
        answer = login(browser, csrf, "mallory", "guess")
    assert answer.status_code == 401 and "wrong token" in answer.text
    assert "a wrong token (form) from testclient, 1 in a row" in caplog.text


def test_the_shared_token_does_not_take_a_listed_persons_name(
    ledger: denpyo.Ledger, ids: dict[str, int], users: tuple[Path, dict[str, str]]
) -> None:
    """With the shared token, `april` (a person of the users file) is refused: the
    history would say april did what the token's holder did."""
    path, _ = users
    app = create_app(ledger, token=TOKEN, users=path)
    fake_clock(app)
    browser = client(app)
    csrf = csrf_of(browser.get("/login").text)
    for name in ("april", " APRIL "):
        answer = login(browser, csrf, name, TOKEN)
        assert answer.status_code == 403 and "sign in with your own token" in answer.text
        assert "denpyo_session" not in browser.cookies
    script = client(app)
    by_april = {"authorization": f"Bearer {TOKEN}", "x-denpyo-by": "april"}
    done = script.post(
        f"/submissions/{ids['rejected']}/abandon", data={"note": "n"}, headers=by_april
    )
    assert done.status_code == 403 and "send their own token" in done.text
    assert not any("april" in line for line in history(ledger, ids["rejected"]))
    stranger, _ = sign_in(app, "zed", TOKEN)  # a name nobody has: the history says zed
    assert '<span class="person">zed</span>' in stranger.get("/").text
    people.add(path, "zed", "viewer")  # now a person's name: that session is over
    assert stranger.get("/attention").status_code == 401


@pytest.mark.parametrize(
    "token",
    ["password", " " * 8, "short-token", "aaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab"],
)
def test_weak_tokens_are_refused(ledger: denpyo.Ledger, token: str) -> None:
    with pytest.raises(denpyo.ConfigurationError) as refused:
        create_app(ledger, token=token)
    assert MAKE_TOKEN in str(refused.value)


def test_what_create_app_refuses(ledger: denpyo.Ledger, tmp_path: Path) -> None:
    refusals = [
        ({}, "never open"),
        ({"trusted_header": "X-Forwarded-User"}, "--trusted-proxy"),
        ({"trusted_header": "X-User", "trusted_proxies": ["10.0.0.0/33"]}, "no address"),
        ({"token": TOKEN, "proxy_role": "boss"}, "no role named 'boss'"),
        ({"token": TOKEN, "session_key": b"short"}, "at least 16"),
        ({"users": tmp_path / "missing.json"}, "no users file"),
    ]
    for options, message in refusals:
        with pytest.raises(denpyo.ConfigurationError, match=message):
            create_app(ledger, **options)


def test_the_host_apps_hook_gives_roles_and_read_only_lowers_them(
    ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    def auth(request: Any) -> Access | None:
        name = request.headers.get("x-user")
        return {"o": Access.operator("olga"), "p": Access.approver("pia")}.get(name or "")

    for read_only, allowed in ((False, 303), (True, 403)):
        app = create_app(ledger, auth=auth, read_only=read_only)
        browser = client(app)
        browser.headers["x-user"] = "o"
        csrf = csrf_of(browser.get("/attention").text)
        answer = browser.post(
            f"/submissions/{ids['rejected' if not read_only else 'rejected2']}/abandon",
            data={"note": "gone", "csrf_token": csrf},
            headers={"origin": ORIGIN},
        )
        assert answer.status_code == allowed
    assert op.history(ledger, ids["rejected"]).submission.resolution is not None
