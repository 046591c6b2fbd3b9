"""The dashboard's people: the users file (hashed tokens, written atomically, read
again when it changes), roles and `Access`, the throttle on wrong credentials, the
sessions kept in memory, and the token strength rule."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from dashboard_client import FakeTime
from denpyo.domain.people import Role, parse_role
from denpyo.engine import people
from denpyo.errors import ConfigurationError, InvalidInput
from denpyo.web import Access
from denpyo.web.auth import MAKE_TOKEN, Sessions, Signed, Throttle, strong_token


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "users.json"


# -- the users file ---------------------------------------------------------------------


def test_add_keeps_a_hash_never_the_token_in_a_file_only_its_owner_reads(path: Path) -> None:
    person, token = people.add(path, " alice ", "Operator")
    assert token is not None and token.startswith(f"dpy_{person.id}_")
    assert people.token_id(token) == person.id and len(token) > 40
    assert (person.name, person.role) == ("alice", Role.OPERATOR)
    text = path.read_text()
    assert token not in text and token.split("_", 2)[2] not in text
    assert '"token_hash": "$argon2id$' in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in people.read_people(path)] == ["alice"]
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_list_remove_role_and_reset(path: Path) -> None:
    _, alice_token = people.add(path, "alice", "operator")
    people.add(path, "bob", Role.VIEWER)
    proxied, none = people.add(path, "carol", "approver", token=False)
    assert none is None and proxied.token_hash is None
    listed = [p.listed() for p in people.read_people(path)]
    assert [(p["name"], p["role"], p["token"]) for p in listed] == [
        ("alice", "operator", True),
        ("bob", "viewer", True),
        ("carol", "approver", False),
    ]
    assert all("token_hash" not in p and p["added"].endswith("Z") for p in listed)
    person, was = people.set_role(path, "ALICE", "admin")
    assert (person.role, was) == (Role.ADMIN, Role.OPERATOR)
    before = person.token_hash
    person, new_token = people.reset(path, "alice")
    assert person.token_hash != before and new_token != alice_token
    assert people.remove(path, "bob").name == "bob"
    assert [p.name for p in people.read_people(path)] == ["alice", "carol"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda p: people.add(p, "Alice", "viewer"), "already in"),
        (lambda p: people.add(p, "dave", "boss"), "no role named 'boss'"),
        (lambda p: people.add(p, "   ", "viewer"), "cannot be empty"),
        (lambda p: people.add(p, "eve\x1b[2J", "viewer"), "control characters"),
        (lambda p: people.add(p, "x" * 101, "viewer"), "at most 100"),
        (lambda p: people.remove(p, "nobody"), "no one named 'nobody'"),
        (lambda p: people.set_role(p, "alice", "root"), "no role named 'root'"),
        (lambda p: people.reset(p, "nobody"), "no one named"),
    ],
)
def test_bad_input_writes_nothing(
    path: Path, action: Callable[[Path], object], message: str
) -> None:
    people.add(path, "alice", "operator")
    before = path.read_bytes(), path.stat().st_mtime_ns
    with pytest.raises(InvalidInput, match=message):
        action(path)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_a_missing_or_broken_file_says_so(path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no users file at .*denpyo users add"):
        people.read_people(path)
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="is not a denpyo users file"):
        people.read_people(path)
    path.write_text(json.dumps({"version": 1, "people": [{"name": "x"}]}))
    with pytest.raises(ConfigurationError, match="is not a denpyo users file"):
        people.read_people(path)
    with pytest.raises(ConfigurationError):
        people.Directory(path)
    people.write_people(path, [])
    people.add(path, "alice", "viewer", token=False)
    twice = json.loads(path.read_text())
    twice["people"].append({**twice["people"][0], "id": "other", "name": "ALICE"})
    path.write_text(json.dumps(twice))
    with pytest.raises(ConfigurationError, match="lists the name 'alice' twice"):
        people.read_people(path)


def test_tokens_are_checked_against_the_file_as_it_is_now(
    path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, alice = people.add(path, "alice", "operator")
    _, bob = people.add(path, "bob", "viewer")
    assert alice is not None and bob is not None
    directory = people.Directory(path)
    found = directory.verify(alice)
    assert found is not None and found.name == "alice"
    for wrong in (alice + "x", "dpy_000000000000_" + "a" * 43, "dpy__x", "not-a-token", ""):
        assert directory.verify(wrong) is None
    # A token of one person with another's id is no one's.
    assert directory.verify(f"dpy_{people.token_id(bob)}_{alice.split('_', 2)[2]}") is None

    # A match is remembered: the next check hashes nothing.
    checks: list[str] = []

    class Counting:
        def verify(self, hashed: str, token: str) -> bool:
            checks.append(token)
            return people.PasswordHasher().verify(hashed, token)

    monkeypatch.setattr(people, "HASHER", Counting())
    assert directory.verify(alice) is not None and checks == []
    assert directory.verify(bob) is not None and checks == [bob]
    assert directory.verify(bob) is not None and checks == [bob]
    monkeypatch.undo()

    # A role changed, then the person removed: the next look sees it, cache or not.
    people.set_role(path, "alice", "approver")
    assert directory.by_name("ALICE").role is Role.APPROVER  # type: ignore[union-attr]
    people.remove(path, "alice")
    assert directory.verify(alice) is None and directory.by_name("alice") is None
    # A reset token: the old one stops, the new one works.
    _, new_bob = people.reset(path, "bob")
    assert directory.verify(bob) is None and directory.verify(new_bob) is not None

    # A file broken by hand lets nobody in, and says so; fixed, it is read again.
    good = path.read_text()
    path.write_text("{broken")
    with caplog.at_level(logging.ERROR, logger="denpyo.web"):
        assert directory.people() == [] and directory.verify(new_bob) is None
    assert "nobody of the users file may sign in" in caplog.text
    path.write_text(good)
    assert directory.verify(new_bob) is not None


def test_a_remembered_token_is_checked_again_after_a_while(path: Path) -> None:
    _, token = people.add(path, "alice", "operator")
    assert token is not None
    clock = FakeTime()
    directory = people.Directory(path, clock=clock.clock)
    assert directory.verify(token) is not None
    assert len(directory._matched) == 1
    clock.now += people.CACHE_SECONDS + 1
    assert directory.verify(token) is not None  # hashed again, and remembered anew
    [(_, _, until)] = directory._matched.values()
    assert until == clock.now + people.CACHE_SECONDS


# -- roles and Access -------------------------------------------------------------------


def test_roles_and_access() -> None:
    assert [r.value for r in sorted(Role, key=lambda r: r.rank)] == [
        "viewer",
        "operator",
        "approver",
        "admin",
    ]
    assert parse_role(" Admin ") is Role.ADMIN
    with pytest.raises(InvalidInput, match="choose viewer, operator, approver, admin"):
        parse_role("root")
    table = {
        Access.read_only("v"): (Role.VIEWER, False, False, False),
        Access.operator("o"): (Role.OPERATOR, True, False, False),
        Access.approver("p"): (Role.APPROVER, True, True, False),
        Access.admin("a"): (Role.ADMIN, True, True, True),
    }
    for access, (role, act, approve, manage) in table.items():
        assert (access.role, access.can_act, access.can_approve, access.can_manage) == (
            role,
            act,
            approve,
            manage,
        )
        lowered = access.at_most(Role.VIEWER)
        assert lowered.role is Role.VIEWER and lowered.name == access.name
        assert not lowered.can_act
    assert Access.read_only("v").at_most(Role.ADMIN).role is Role.VIEWER
    assert Access("x", Role.OPERATOR) == Access.operator("x")
    with pytest.raises(TypeError):
        Access("x", True)  # type: ignore[arg-type]  # the old Access(name, can_act)


# -- the throttle -----------------------------------------------------------------------


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def test_wrong_credentials_back_off_longer_each_time_and_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeTime()
    throttle = Throttle(clock=fake.clock)
    back_offs = []
    with caplog.at_level(logging.WARNING, logger="denpyo.web"):
        for _ in range(8):
            assert throttle.wait("203.0.113.9") == 0
            back_offs.append(throttle.failed("203.0.113.9", "bearer"))
            assert throttle.wait("203.0.113.9") == back_offs[-1]
            if back_offs[-1]:
                fake.now += back_offs[-1] - 0.5
                assert throttle.wait("203.0.113.9") == 0.5  # not yet
                fake.now += 0.5
    assert back_offs == [0, 1, 2, 4, 8, 16, 30, 30]  # the first mistake is free
    lines = [r.getMessage() for r in caplog.records if r.name == "denpyo.web"]
    assert len(lines) == 8 and all(r.levelno == logging.WARNING for r in caplog.records)
    assert (
        lines[2]
        == "dashboard: a wrong token (bearer) from 203.0.113.9, 3 in a row; the next checked in 2 s"
    )


def test_a_quiet_spell_starts_over_a_success_does_not_and_sources_count_apart() -> None:
    fake = FakeTime()
    throttle = Throttle(clock=fake.clock)
    assert [throttle.failed("a", "form") for _ in range(3)] == [0, 1, 2]
    assert throttle.failed("b", "form") == 0  # another source starts over
    assert throttle.wait("c") == 0  # and another has no back-off at all
    assert throttle.in_a_row("a") == 3  # nothing but a quiet spell ends it
    fake.now += 15 * 60  # quiet for 15 minutes: forgotten
    assert throttle.in_a_row("a") == 0 and len(throttle) == 0 and throttle.wait("a") == 0
    assert throttle.failed("a", "bearer") == 0


def test_the_throttle_remembers_a_bounded_number_of_sources() -> None:
    fake = FakeTime()
    throttle = Throttle(clock=fake.clock, sources=100)
    for i in range(250):
        fake.now += 0.001
        throttle.failed(f"10.0.{i // 250}.{i % 250}", "bearer")
    assert len(throttle) == 100
    assert throttle.in_a_row("10.0.0.0") == 0  # the longest quiet went first
    assert throttle.in_a_row("10.0.0.249") == 1


def test_checks_from_one_source_take_turns_and_nothing_sleeps() -> None:
    """Two checks at once from one source: the second starts when the first ends;
    another source does not wait for them. No turn is held while nothing is checked."""
    throttle = Throttle()
    events: list[str] = []

    async def check(source: str, label: str) -> None:
        async with throttle.turn(source):
            events.append(f"{label} checked")
            await asyncio.sleep(0)  # a hash on a thread
            events.append(f"{label} answered")

    async def at_once() -> None:
        await asyncio.gather(check("s", "first"), check("s", "second"), check("t", "other"))

    asyncio.run(at_once())
    assert events.index("second checked") > events.index("first answered")
    assert events.index("other checked") < events.index("first answered")
    assert throttle._turns == {}  # no lock kept once nobody waits


# -- sessions ---------------------------------------------------------------------------


def test_sessions_end_at_sign_out_when_idle_and_when_old() -> None:
    fake = FakeTime()
    sessions = Sessions(b"k" * 32, clock=fake.clock)
    alice = Signed("alice", "token", Role.ADMIN)
    cookie = sessions.start(alice)
    sid, _, _ = cookie.partition(".")
    assert len(sid) >= 40 and "alice" not in cookie
    found = sessions.find(cookie)
    assert found is not None and found.signed == alice
    assert sessions.find(f"{sid}.{'0' * 64}") is None  # a forged signature
    assert Sessions(b"other-key" * 4, clock=fake.clock).find(cookie) is None
    sessions.end(cookie)
    assert sessions.find(cookie) is None  # signed out: the cookie replayed is nobody

    idle = sessions.start(alice)
    fake.now += 2 * 3600 - 1
    assert sessions.find(idle) is not None  # seen: the idle time starts again
    fake.now += 2 * 3600
    assert sessions.find(idle) is None

    busy = sessions.start(alice)
    for _ in range(12):
        fake.now += 3600 - 1
        assert sessions.find(busy) is not None
    fake.now += 12
    assert sessions.find(busy) is None  # 12 hours after its sign-in, however busy
    assert len(sessions) == 0


def test_sessions_are_bounded() -> None:
    sessions = Sessions(b"k" * 32, most=10)
    cookies = [sessions.start(Signed(f"p{i}", "token", Role.VIEWER)) for i in range(15)]
    assert len(sessions) == 10
    assert sessions.find(cookies[0]) is None and sessions.find(cookies[-1]) is not None


# -- the dashboard's token --------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("password", "8 characters"),
        (" " * 8, "0 characters"),
        ("   correct-horse   ", "13 characters"),
        ("aaaaaaaaaaaaaaaaaaaaaaaa", "1 different characters"),
        ("abcdabcdabcdabcdabcd", "4 different characters"),
        ("password12345678", "runs, repeats or common words"),
        ("1234567890123456", "runs, repeats or common words"),
        ("abcdefghabcdefgh", "runs, repeats or common words"),
        ("Password-Password-2026", "runs, repeats or common words"),
        ("zyxwvutsrqponmlk", "runs, repeats or common words"),
    ],
)
def test_a_weak_token_is_refused_with_how_to_make_one(token: str, why: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        strong_token(token)
    assert why in str(refused.value) and MAKE_TOKEN in str(refused.value)


def test_a_strong_token_is_taken_trimmed() -> None:
    import secrets

    made = secrets.token_urlsafe(24)
    assert strong_token(f" {made}\n") == made
    assert strong_token("correct-horse-battery") == "correct-horse-battery"
