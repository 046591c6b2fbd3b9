"""What the dashboard's HTTP tests share: a client as a browser (no redirect
followed), the page's CSRF token, a sign-in through the form, and a clock for the
wrong-token throttle that moves only when told."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

ORIGIN = "http://127.0.0.1:8470"


def client(app: Any, base_url: str = ORIGIN, peer: str = "testclient") -> TestClient:
    return TestClient(app, base_url=base_url, follow_redirects=False, client=(peer, 50000))


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def sign_in(app: Any, name: str, token: str, base_url: str = ORIGIN) -> tuple[TestClient, str]:
    """A browser signed in through the form: its client and its CSRF token."""
    browser = client(app, base_url)
    csrf = csrf_of(browser.get("/login").text)
    answer = browser.post(
        "/login",
        data={"name": name, "token": token, "csrf_token": csrf},
        headers={"origin": base_url},
    )
    assert answer.status_code == 303, answer.text
    return browser, csrf


class FakeTime:
    """A clock that moves only when a test moves it (`now`): the wrong-token
    throttle's back-off and the sessions' ages, without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now
