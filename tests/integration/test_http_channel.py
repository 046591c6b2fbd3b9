"""HttpChannel against the fake provider (and a tiny scripted server for odd replies)."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, TypeVar

import pytest
from aiohttp import web

from conftest import free_port
from denpyo.channels.http import HttpChannel, parse_retry_after
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown
from denpyo.errors import ConfigurationError, Rejected, Transient
from denpyo.testing import FakeProvider

T = TypeVar("T")


def sub(key: str = "idem-1", payload: Any = None) -> Submission:
    return Submission(
        id=1,
        channel="c",
        key="k",
        idempotency_key=key,
        payload={"to": "a@example.com"} if payload is None else payload,
        status=Status.REQUESTING,
    )


def with_channel(channel: HttpChannel, body: Callable[[HttpChannel], Awaitable[T]]) -> T:
    """Run `body(channel)` on a fresh loop and close the channel's session before it ends."""

    async def main() -> T:
        async with channel:
            return await body(channel)

    return asyncio.run(main())


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    p = FakeProvider().start()
    try:
        yield p
    finally:
        p.stop()


def channel_for(p: FakeProvider, **kwargs: Any) -> HttpChannel:
    return HttpChannel(p.send_url, lookup_url=p.lookup_url, **kwargs)


def test_send_returns_the_remote_id(provider: FakeProvider) -> None:
    remote_id = with_channel(channel_for(provider), lambda ch: ch.send(sub()))
    assert remote_id is not None
    assert provider.accepted_ids_for("idem-1") == [remote_id]
    [effect] = provider.accepted()
    assert effect["payload"] == {"to": "a@example.com"}


def test_honoured_key_gives_the_same_id_and_one_effect(provider: FakeProvider) -> None:
    async def twice(ch: HttpChannel) -> tuple[str | None, str | None]:
        return await ch.send(sub()), await ch.send(sub())

    first, second = with_channel(channel_for(provider), twice)
    assert first == second
    stats = provider.stats()
    assert (stats.accepted, stats.duplicates) == (1, 0)


def test_ignored_key_gives_two_effects() -> None:
    async def twice(ch: HttpChannel) -> tuple[str | None, str | None]:
        return await ch.send(sub()), await ch.send(sub())

    with FakeProvider(honour_idempotency=False) as p:
        first, second = with_channel(channel_for(p), twice)
        assert first != second
        stats = p.stats()
        assert (stats.accepted, stats.duplicates) == (2, 1)
        assert p.accepted_ids_for("idem-1") == [first, second]


def test_503_is_transient_with_retry_after(provider: FakeProvider) -> None:
    with pytest.raises(Transient) as caught:
        with_channel(channel_for(provider), lambda ch: ch.send(sub(payload={"_fault": "fail"})))
    assert caught.value.retry_after == 1.0
    assert "HTTP 503" in str(caught.value)
    assert provider.stats().accepted == 0


def test_422_is_rejected(provider: FakeProvider) -> None:
    with pytest.raises(Rejected, match=r"HTTP 422: .*rejected by provider"):
        with_channel(channel_for(provider), lambda ch: ch.send(sub(payload={"_fault": "reject"})))
    stats = provider.stats()
    assert (stats.rejected, stats.accepted) == (1, 0)


def test_dropped_reply_is_ambiguous(provider: FakeProvider) -> None:
    with pytest.raises(Exception) as caught:
        with_channel(channel_for(provider), lambda ch: ch.send(sub(payload={"_fault": "drop"})))
    assert not isinstance(caught.value, Transient | Rejected)
    assert isinstance(caught.value, ConnectionError)
    assert "may have arrived" in str(caught.value)
    stats = provider.stats()
    assert (stats.accepted, stats.dropped) == (1, 1)


def test_timeout_after_acceptance_is_ambiguous() -> None:
    # The reply would come in an hour (the provider's stop answers it): the send ends
    # on its own 0.3 s timeout, never on the reply.
    with FakeProvider(slow_seconds=3600) as p:
        with pytest.raises(Exception) as caught:
            with_channel(
                channel_for(p, timeout=0.3), lambda ch: ch.send(sub(payload={"_fault": "slow"}))
            )
        assert not isinstance(caught.value, Transient | Rejected)
        assert isinstance(caught.value, TimeoutError)
        stats = p.stats()
        assert (stats.accepted, stats.slow) == (1, 1)


def test_refused_connection_is_transient() -> None:
    url = f"http://127.0.0.1:{free_port()}/send"
    with pytest.raises(Transient, match="connection refused"):
        with_channel(HttpChannel(url), lambda ch: ch.send(sub()))


def test_a_failure_before_the_request_left_is_transient(provider: FakeProvider) -> None:
    """Nothing was written (the resolver's executor is shut down, the session closed
    under it): known not sent, so transient, never ambiguous."""
    from concurrent.futures import ThreadPoolExecutor

    by_name = provider.send_url.replace("127.0.0.1", "localhost")  # resolved in a thread

    async def shut_executor(ch: HttpChannel) -> Any:
        executor = ThreadPoolExecutor(1)
        asyncio.get_running_loop().set_default_executor(executor)
        executor.shutdown()
        return await ch.send(sub())

    async def closed_session(ch: HttpChannel) -> Any:
        session = await ch._session()
        await session.close()
        ch._session = lambda: asyncio.sleep(0, session)  # type: ignore[method-assign]
        return await ch.send(sub())

    for body, text in (
        (shut_executor, "cannot schedule new futures after shutdown"),
        (closed_session, "Session is closed"),
    ):
        with pytest.raises(Transient, match="not sent") as caught:
            with_channel(HttpChannel(by_name), body)
        assert text in str(caught.value)
    assert provider.stats().requests == 0


def test_the_engine_records_a_call_that_never_left_as_transient(
    provider: FakeProvider, db_url: str
) -> None:
    import denpyo

    by_name = provider.send_url.replace("127.0.0.1", "localhost")
    mail = HttpChannel(by_name)
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("mail", max_attempts=3)(mail.send)

        async def submit() -> Any:
            from concurrent.futures import ThreadPoolExecutor

            executor = ThreadPoolExecutor(1)
            asyncio.get_running_loop().set_default_executor(executor)
            executor.shutdown()
            try:
                return await ledger.asubmit("mail", "k", {})
            finally:
                await mail.aclose()

        with pytest.raises(denpyo.SubmissionFailed) as caught:
            asyncio.run(submit())
        row = caught.value.submission
        assert (row.status, row.error_kind) == (Status.FAILED, denpyo.ErrorKind.TRANSIENT)
        assert not row.in_doubt and row.next_attempt_at is not None
    assert provider.stats().requests == 0


def test_verify_delivered_and_not_delivered(provider: FakeProvider) -> None:
    odd_key = "order:42/a b?é"

    async def body(ch: HttpChannel) -> tuple[Any, Any, Any]:
        remote_id = await ch.send(sub(odd_key))
        return remote_id, await ch.verify(sub(odd_key)), await ch.verify(sub("never-sent"))

    remote_id, found, missing = with_channel(channel_for(provider), body)
    assert found == Delivered(remote_id)
    assert missing == NotDelivered()


def test_verify_unknown_when_the_lookup_is_unavailable(provider: FakeProvider) -> None:
    provider.configure(lookup_unknown_rate=1.0)
    verdict = with_channel(channel_for(provider), lambda ch: ch.verify(sub()))
    assert isinstance(verdict, Unknown)
    assert "503" in verdict.why


def test_verify_unknown_when_the_provider_is_down() -> None:
    p = FakeProvider().start()
    channel = channel_for(p)
    p.stop()
    verdict = with_channel(channel, lambda ch: ch.verify(sub()))
    assert isinstance(verdict, Unknown)
    assert "ClientConnectorError" in verdict.why


def test_verifier_needs_a_lookup_url(provider: FakeProvider) -> None:
    assert channel_for(provider).verifier is not None
    plain = HttpChannel(provider.send_url)
    assert plain.verifier is None
    with pytest.raises(ConfigurationError):
        with_channel(plain, lambda ch: ch.verify(sub()))
    with pytest.raises(ConfigurationError):
        HttpChannel(provider.send_url, lookup_url=provider.url + "/lookup")


@asynccontextmanager
async def scripted_server(
    status: int, body: bytes, headers: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """A one-route server answering every POST with the given reply."""

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, body=body, headers=headers)

    app = web.Application()
    app.router.add_post("/send", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/send"
    finally:
        await runner.cleanup()


def send_to_script(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Any:
    async def main() -> Any:
        async with scripted_server(status, body, headers) as url, HttpChannel(url) as ch:
            return await ch.send(sub())

    return asyncio.run(main())


@pytest.mark.parametrize("status", [408, 429, 500, 502, 504])
def test_retryable_statuses_are_transient(status: int) -> None:
    with pytest.raises(Transient, match=f"HTTP {status}: busy") as caught:
        send_to_script(status, b"busy", {"Retry-After": "7"})
    assert caught.value.retry_after == 7.0


@pytest.mark.parametrize("status", [400, 401, 404, 409, 302])
def test_other_refusals_are_rejected(status: int) -> None:
    with pytest.raises(Rejected, match=f"HTTP {status}") as caught:
        send_to_script(status, b"x" * 2000, {"Location": "/elsewhere"})
    assert len(str(caught.value)) < 520


def test_success_without_an_id() -> None:
    assert send_to_script(200, b"OK") is None
    assert send_to_script(201, b'{"other": 1}') is None
    assert send_to_script(202, b'{"id": 12}') == "12"


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0


def test_one_session_per_loop_and_sync_close(provider: FakeProvider) -> None:
    """Used from a background loop and from asyncio.run; close() leaves no warning behind."""
    channel = channel_for(provider)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        background_id = asyncio.run_coroutine_threadsafe(channel.send(sub("a")), loop).result(5)
        assert with_channel(channel, lambda ch: ch.send(sub("b"))) != background_id
        assert asyncio.run_coroutine_threadsafe(channel.send(sub("a")), loop).result(5) == (
            background_id
        )
        channel.close()
        channel.close()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    gc.collect()  # an unclosed session would warn here, and warnings are errors
    assert provider.stats().accepted == 2


def test_concurrent_sends(provider: FakeProvider) -> None:
    async def many(ch: HttpChannel) -> list[str | None]:
        return await asyncio.gather(*(ch.send(sub(f"k{i}")) for i in range(200)))

    ids = with_channel(channel_for(provider, connection_limit=20), many)
    assert len(set(ids)) == 200
    assert provider.stats().accepted == 200


def test_a_call_whose_lease_ran_out_waiting_for_a_connection_never_leaves(
    provider: FakeProvider,
) -> None:
    """The last moment: a connection is ready, nothing is written yet. A call that
    waited past its lease (here for the only connection) raises LeaseExpired unsent."""
    from dataclasses import replace

    from denpyo.domain.lease import Lease
    from denpyo.errors import LeaseExpired

    provider.configure(latency=0.8)
    channel = channel_for(provider, connection_limit=1)

    async def body(ch: HttpChannel) -> list[Any]:
        first = replace(sub("first"), lease=Lease(30.0))
        late = replace(sub("late"), lease=Lease(0.4))  # starts in 0.36 s, or not at all
        return await asyncio.gather(ch.send(first), ch.send(late), return_exceptions=True)

    sent, refused = with_channel(channel, body)
    assert isinstance(sent, str) and isinstance(refused, LeaseExpired)
    assert provider.accepted_keys() == {"first": 1}
    fresh = replace(sub("fresh"), lease=Lease(30.0))
    assert isinstance(with_channel(channel, lambda ch: ch.send(fresh)), str)


@pytest.mark.parametrize(
    "bad",
    ["not a url", "http//missing-colon", "ftp://x/y", "http://", "http://127.0.0.1:99999/x", ""],
)
def test_a_malformed_url_is_refused_when_the_channel_is_made(bad: str) -> None:
    """Not at the first call, where the client's error would be taken as ambiguous
    and the row would wait for a person as if the call might have arrived."""
    with pytest.raises(ConfigurationError, match="not an absolute http"):
        HttpChannel(bad)
    with pytest.raises(ConfigurationError, match="lookup_url"):
        HttpChannel("http://127.0.0.1:8000/send", lookup_url=f"{bad}/{{idempotency_key}}")
    HttpChannel("https://api.example/send", lookup_url="https://api.example/m/{idempotency_key}")


README_EXAMPLE = """
import asyncio, os, sys

import denpyo
from denpyo.channels.http import HttpChannel

PROVIDER = os.environ["TEST_PROVIDER"]
mail = HttpChannel(url=PROVIDER + "/send", lookup_url=PROVIDER + "/lookup/{idempotency_key}")


def register(ledger):
    @ledger.channel("invoice-email", max_attempts=8)
    async def send_invoice(sub: denpyo.Submission) -> str | None:
        return await mail.send(sub)


def shape_with():
    with denpyo.Ledger(os.environ["DATABASE_URL"]) as ledger:
        register(ledger)
        assert ledger.submit("invoice-email", "order:42", {"to": "a@example.com"}).remote_id
        ledger.enqueue("invoice-email", "order:43", {"to": "b@example.com"})
        assert ledger.work(until_idle=True, poll_interval=0.01).attempted == 1


def shape_script():
    ledger = denpyo.Ledger(os.environ["DATABASE_URL"])
    register(ledger)
    assert ledger.submit("invoice-email", "order:42", {"to": "a@example.com"}).remote_id


def shape_asyncio():
    ledger = denpyo.Ledger(os.environ["DATABASE_URL"])
    register(ledger)

    async def main():
        assert (await ledger.asubmit("invoice-email", "order:42", {})).remote_id
        await ledger.aenqueue("invoice-email", "order:43", {})
        assert (await ledger.awork(until_idle=True, poll_interval=0.01)).attempted == 1

    asyncio.run(main())
    ledger.close()


if __name__ == "__main__":
    globals()["shape_" + sys.argv[1]]()
    print("done")
else:
    ledger = denpyo.Ledger(os.environ["DATABASE_URL"])
    register(ledger)
"""


@pytest.mark.parametrize("shape", ["with", "script", "asyncio", "worker"])
def test_the_readme_example_leaves_no_session_open(
    provider: FakeProvider, db_url: str, tmp_path: Any, shape: str
) -> None:
    """The README's channel, a plain function around `mail.send`: every session it
    opened is closed with its loop, in a script, under asyncio.run, and in a worker
    stopped by SIGTERM. An unclosed one is reported at exit ("Unclosed client
    session", and "ImportError: sys.meta_path is None" when that comes too late)."""
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "readme_app.py").write_text(README_EXAMPLE)
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "TEST_PROVIDER": provider.url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYTHONWARNINGS": "always",
    }
    if shape != "worker":
        command = [sys.executable, str(tmp_path / "readme_app.py"), shape]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0 and done.stdout == "done\n", done.stderr
        stderr = done.stderr
    else:
        import denpyo

        with denpyo.Ledger(db_url) as ledger:
            ledger.channel("invoice-email")(lambda sub: None)
            ledger.enqueue("invoice-email", "order:44", {})
        command = [sys.executable, "-m", "denpyo.cli", "--app", "readme_app:ledger", "worker"]
        worker = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while provider.stats().accepted < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0 and "synced 1" in stderr, stderr
    assert "Unclosed" not in stderr and "ImportError" not in stderr, stderr


def test_the_key_goes_in_the_header_the_provider_reads() -> None:
    async def twice(ch: HttpChannel) -> tuple[str | None, str | None]:
        return await ch.send(sub()), await ch.send(sub())

    with FakeProvider(key_header="PayPal-Request-Id") as p:
        first, second = with_channel(channel_for(p, key_header="PayPal-Request-Id"), twice)
        assert first == second and p.accepted_keys() == {"idem-1": 1}
        with pytest.raises(Rejected, match="HTTP 400"):  # the default header: not this one
            with_channel(channel_for(p), lambda ch: ch.send(sub()))


def test_the_key_goes_in_a_body_field() -> None:
    with FakeProvider(key_field="metadata.denpyo_key") as p:
        row = sub(payload={"amount": 500, "metadata": {"order": "42"}})
        channel = channel_for(p, key_header=None, key_field="metadata.denpyo_key")
        with_channel(channel, lambda ch: ch.send(row))
        [effect] = p.accepted()
        assert effect["payload"] == {
            "amount": 500,
            "metadata": {"order": "42", "denpyo_key": "idem-1"},
        }
        assert row.payload == {"amount": 500, "metadata": {"order": "42"}}  # as recorded


def test_a_payload_that_cannot_hold_the_key_field_is_rejected_unsent(
    provider: FakeProvider,
) -> None:
    channel = channel_for(provider, key_field="custom_args.denpyo_key")
    for payload in ([1, 2], {"custom_args": "text"}):
        with pytest.raises(Rejected, match="nothing was sent"):
            with_channel(channel, lambda ch, p=payload: ch.send(sub(payload=p)))  # type: ignore[misc]
    assert provider.stats().requests == 0


@pytest.mark.parametrize(
    "options", [{"key_header": "Bad Header"}, {"key_header": ""}, {"key_field": "a..b"}]
)
def test_a_bad_key_header_or_field_is_refused_when_the_channel_is_made(
    options: dict[str, str],
) -> None:
    with pytest.raises(ConfigurationError):
        HttpChannel("http://127.0.0.1:1/send", **options)  # type: ignore[arg-type]


def test_by_default_the_channel_caps_no_connections(provider: FakeProvider) -> None:
    """No cap of the channel's own below the worker's --concurrency (aiohttp's
    default is 100: calls over it would wait for a connection, silently); a cap
    given is kept."""

    async def limit(ch: HttpChannel) -> int:
        await ch.send(sub(f"k{id(ch)}"))
        [held] = ch._sessions.values()
        connector = held.session.connector
        assert connector is not None
        return connector.limit

    assert with_channel(channel_for(provider), limit) == 0  # aiohttp: no limit
    assert with_channel(channel_for(provider, connection_limit=7), limit) == 7


@pytest.mark.parametrize("limit", [0, -5, 2.5, "10", True])
def test_a_connection_limit_that_is_no_count_is_refused(limit: Any) -> None:
    from denpyo.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="connection_limit"):
        HttpChannel("http://127.0.0.1:9/send", connection_limit=limit)
