"""The fake provider over plain HTTP (stdlib client), in-process and as a subprocess,
on both of its transports: aiohttp, and the standard library's http.server."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from denpyo.testing import FakeProvider, FakeProviderClient, ProviderStats
from denpyo.testing._provider import Transport
from waiting import wait_until


def call(
    url: str, payload: Any = None, *, key: str | None = None, method: str = "POST"
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, decoded JSON body) of one request; HTTP errors are returned, not raised."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    data = None if method == "GET" else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


@pytest.fixture(params=["aiohttp", "stdlib"])
def transport(request: pytest.FixtureRequest) -> Transport:
    t: Transport = request.param
    return t


@pytest.fixture
def provider(transport: Transport) -> Iterator[FakeProvider]:
    p = FakeProvider(transport=transport).start()
    try:
        yield p
    finally:
        p.stop()


def test_accepts_and_answers_an_id(provider: FakeProvider) -> None:
    status, _, body = call(provider.send_url, {"to": "a@example.com"}, key="k1")
    assert status == 200
    assert body["duplicate"] is False
    assert body["id"].startswith("msg_") and len(body["id"]) == 16
    assert provider.accepted_ids_for("k1") == [body["id"]]
    [effect] = provider.accepted()
    assert effect["payload"] == {"to": "a@example.com"}
    assert effect["idempotency_key"] == "k1"


def test_idempotency_key_is_required(provider: FakeProvider) -> None:
    status, _, body = call(provider.send_url, {"a": 1})
    assert status == 400
    assert "Idempotency-Key" in body["error"]
    assert provider.stats().accepted == 0


def test_honoured_key_answers_the_first_id_without_a_new_effect(provider: FakeProvider) -> None:
    _, _, first = call(provider.send_url, {"a": 1}, key="same")
    status, _, second = call(provider.send_url, {"a": 1}, key="same")
    assert status == 200
    assert second == {"id": first["id"], "duplicate": True}
    stats = provider.stats()
    assert (stats.requests, stats.accepted, stats.distinct_keys, stats.duplicates) == (2, 1, 1, 0)
    assert stats.replayed == 1


def test_a_duplicate_skips_the_fault_draw(provider: FakeProvider) -> None:
    call(provider.send_url, {"a": 1}, key="k")
    provider.configure(fail_rate=1.0)
    status, _, body = call(provider.send_url, {"a": 1}, key="k")
    assert status == 200 and body["duplicate"] is True


def test_ignored_key_makes_a_new_effect_each_time(transport: Transport) -> None:
    with FakeProvider(honour_idempotency=False, transport=transport) as provider:
        ids = [call(provider.send_url, {"a": 1}, key="same")[2]["id"] for _ in range(3)]
        assert len(set(ids)) == 3
        assert provider.accepted_ids_for("same") == ids
        assert provider.accepted_keys() == {"same": 3}
        stats = provider.stats()
        assert (stats.accepted, stats.distinct_keys, stats.duplicates) == (3, 1, 2)


def test_forced_fail_and_reject_record_nothing(provider: FakeProvider) -> None:
    status, headers, _ = call(provider.send_url, {"_fault": "fail"}, key="f")
    assert status == 503
    assert headers["Retry-After"] == "1"
    status, _, body = call(provider.send_url, {"_fault": "reject"}, key="r")
    assert (status, body) == (422, {"error": "rejected by provider"})
    status, _, _ = call(provider.send_url, {"_fault": "bogus"}, key="b")
    assert status == 400
    stats = provider.stats()
    assert (stats.failed, stats.rejected, stats.accepted) == (1, 1, 0)
    assert provider.accepted_keys() == {}


def test_forced_drop_records_then_closes_without_reply(provider: FakeProvider) -> None:
    with pytest.raises((ConnectionError, urllib.error.URLError, OSError)):
        call(provider.send_url, {"_fault": "drop"}, key="d")
    stats = provider.stats()
    assert (stats.accepted, stats.dropped) == (1, 1)
    # honoured: the resend gets the id of the dropped call
    status, _, body = call(provider.send_url, {"_fault": "drop"}, key="d")
    assert status == 200 and body == {"id": provider.accepted_ids_for("d")[0], "duplicate": True}


def test_forced_slow_records_then_answers_late(transport: Transport) -> None:
    with FakeProvider(slow_seconds=0.3, transport=transport) as p:
        started = time.monotonic()
        status, _, body = call(p.send_url, {"_fault": "slow"}, key="s")
        assert time.monotonic() - started >= 0.3
        assert status == 200 and body == {"id": p.accepted_ids_for("s")[0], "duplicate": False}
        assert (p.stats().accepted, p.stats().slow) == (1, 1)


def test_stop_answers_the_slow_replies_at_once(transport: Transport) -> None:
    # Left alone the reply would come in an hour: the client has it because the stop
    # answered it.
    p = FakeProvider(slow_seconds=3600, transport=transport).start()
    answers: list[int] = []
    client = threading.Thread(
        target=lambda: answers.append(call(p.send_url, {"_fault": "slow"}, key="s")[0])
    )
    client.start()
    wait_until(lambda: p.stats().slow == 1, "the slow call to arrive")
    p.stop()
    wait_until(lambda: not client.is_alive(), "the stop to answer the slow reply")
    assert answers == [200]


def test_latency_comes_before_each_send(transport: Transport) -> None:
    with FakeProvider(latency=0.2, transport=transport) as p:
        started = time.monotonic()
        assert call(p.send_url, {}, key="k")[0] == 200
        assert time.monotonic() - started >= 0.2


def test_a_connection_is_kept_alive_until_the_provider_stops(transport: Transport) -> None:
    p = FakeProvider(transport=transport).start()
    host, port = p.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        for key in ("k1", "k2"):
            conn.request("POST", "/send", b"{}", {"Idempotency-Key": key})
            assert conn.getresponse().read() and conn.sock is not None  # still open
        p.stop()
        with pytest.raises(OSError):  # nothing is served after stop, even on that connection
            conn.request("POST", "/send", b"{}", {"Idempotency-Key": "k3"})
            conn.getresponse()
        assert p.accepted_keys() == {"k1": 1, "k2": 1}
    finally:
        conn.close()
        p.stop()


def test_an_unknown_endpoint_or_method(provider: FakeProvider) -> None:
    assert call(provider.url + "/nope", method="GET")[0] == 404
    assert call(provider.url + "/lookup/a/b", method="GET")[0] == 404
    assert call(provider.send_url, method="GET")[0] == 405
    assert provider.stats() == ProviderStats()


def test_lookup(provider: FakeProvider) -> None:
    _, _, sent = call(provider.send_url, {"a": 1}, key="order:1/x y")
    url = provider.lookup_url.replace("{idempotency_key}", "order%3A1%2Fx%20y")
    assert call(url, method="GET")[:3:2] == (200, {"id": sent["id"]})
    missing = provider.lookup_url.replace("{idempotency_key}", "nope")
    assert call(missing, method="GET")[:3:2] == (404, {"error": "not found"})
    provider.configure(lookup_unknown_rate=1.0)
    assert call(url, method="GET")[0] == 503
    assert provider.stats().lookups == 3


def test_stats_accepted_reset_and_configure_endpoints(provider: FakeProvider) -> None:
    call(provider.send_url, {"a": 1}, key="k")
    status, _, stats = call(provider.url + "/stats", method="GET")
    assert status == 200 and ProviderStats.from_dict(stats) == provider.stats()
    status, _, effects = call(provider.url + "/accepted", method="GET")
    assert [e["idempotency_key"] for e in effects] == ["k"]
    assert set(effects[0]) == {"id", "idempotency_key", "payload", "at"}
    status, _, options = call(provider.url + "/configure", {"fail_rate": 1.0})
    assert status == 200 and options["fail_rate"] == 1.0
    assert call(provider.send_url, {}, key="k2")[0] == 503
    assert call(provider.url + "/configure", {"fail_rate": 2})[0] == 400
    assert call(provider.url + "/configure", {"no_such": 1})[0] == 400
    assert call(provider.url + "/reset", {})[0] == 200
    assert provider.stats() == ProviderStats()
    assert provider.options.fail_rate == 1.0  # reset keeps the options


def test_configure_while_running(provider: FakeProvider) -> None:
    provider.configure(reject_rate=1.0)
    assert call(provider.send_url, {}, key="a")[0] == 422
    provider.configure(reject_rate=0.0, latency=0.01)
    assert call(provider.send_url, {}, key="a")[0] == 200
    with pytest.raises(ValueError):
        provider.configure(fail_rate=0.7, reject_rate=0.7)
    with pytest.raises(ValueError):
        provider.configure(colour="red")
    assert provider.options.fail_rate == 0.0


def test_seeded_fault_draws_are_reproducible(transport: Transport) -> None:
    def run(seed: int) -> list[int]:
        with FakeProvider(seed=seed, fail_rate=0.3, reject_rate=0.2, transport=transport) as p:
            return [call(p.send_url, {}, key=f"k{i}")[0] for i in range(40)]

    first, second = run(7), run(7)
    assert first == second
    assert {200, 422, 503} <= set(first)
    assert run(8) != first


def test_stop_is_idempotent_and_start_returns_self(transport: Transport) -> None:
    p = FakeProvider(transport=transport)
    with pytest.raises(RuntimeError):
        _ = p.url
    assert p.start() is p
    assert p.start() is p
    url = p.url
    p.stop()
    p.stop()
    with pytest.raises(OSError):
        call(url + "/send", {}, key="k")


def test_runs_as_a_subprocess(transport: Transport) -> None:
    command = [sys.executable, "-m", "denpyo.testing", "--port", "0", "--no-honour-idempotency"]
    proc = subprocess.Popen(
        [*command, "--transport", transport],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.removeprefix("listening on ")
        client = FakeProviderClient(url)
        first = call(url + "/send", {"a": 1}, key="k")[2]["id"]
        second = call(url + "/send", {"a": 1}, key="k")[2]["id"]
        stats = client.stats()
        assert (stats.requests, stats.accepted, stats.duplicates) == (2, 2, 1)
        assert client.accepted_keys() == {"k": 2}
        assert client.accepted_ids_for("k") == [first, second]
        client.configure(fail_rate=1.0)
        assert call(url + "/send", {}, key="k2")[0] == 503
        with pytest.raises(RuntimeError, match="HTTP 400"):
            client.configure(fail_rate=5)
        client.reset()
        assert client.stats() == ProviderStats()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_the_command_on_a_port_in_use_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from denpyo.testing.__main__ import main

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}: ") and err.count("\n") == 1


def test_the_readme_names_every_option_and_endpoint() -> None:
    """The guide's "Try it against the fake provider" is how a user learns it."""
    from denpyo.testing import ProviderOptions
    from denpyo.testing.__main__ import _parser
    from denpyo.testing._core import ENDPOINTS, FAULTS
    from denpyo.testing._wait import parser
    from doc_pages import read

    readme = read("guide/using.md")
    section = readme[readme.index("## Try it against the fake provider") :]
    section = section[: section.index("\n## ", 1)]
    flags = {flag for action in _parser()._actions for flag in action.option_strings}
    for flag in flags - {"-h", "--help", "--honour-idempotency"}:
        assert f"`{flag}" in section, flag
    for name in ProviderOptions.__dataclass_fields__:
        assert name.replace("_", "-") in section or name in section, name
    for method, path in ENDPOINTS:
        assert f"`{method} {path}`" in section, (method, path)
    assert all(f"`{fault}`" in section for fault in FAULTS)
    wait = {flag for action in parser()._actions for flag in action.option_strings}
    assert "`python -m denpyo.testing wait URL`" in section
    assert all(f"`{flag}" in section for flag in wait - {"-h", "--help"}), wait


def test_the_key_may_come_in_a_header_of_another_name(transport: Transport) -> None:
    with FakeProvider(key_header="PayPal-Request-Id", transport=transport) as p:
        status, _, body = call(p.send_url, {"a": 1}, key="k")  # sent as Idempotency-Key
        assert status == 400 and "PayPal-Request-Id" in body["error"]
        request = urllib.request.Request(
            p.send_url,
            data=b'{"a": 1}',
            method="POST",
            headers={"Content-Type": "application/json", "PayPal-Request-Id": "k"},
        )
        for _ in range(2):
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 200
        assert p.accepted_keys() == {"k": 1}


def test_the_key_may_come_in_a_body_field(transport: Transport) -> None:
    with FakeProvider(key_field="metadata.denpyo_key", transport=transport) as p:
        assert call(p.send_url, {"metadata": {}})[0] == 400
        for _ in range(2):
            assert call(p.send_url, {"metadata": {"denpyo_key": "k"}, "amount": 5})[0] == 200
        assert p.accepted_keys() == {"k": 1}


def test_a_provider_without_keys_acts_on_every_request(transport: Transport) -> None:
    with FakeProvider(key_header=None, transport=transport) as p:
        assert call(p.send_url, {"to": "a"}, key="ignored")[0] == 200
        assert call(p.send_url, {"to": "a"})[0] == 200
        assert p.stats().accepted == 2 and p.accepted_keys() == {}
        assert [e["idempotency_key"] for e in p.accepted()] == [None, None]


def test_a_key_is_forgotten_after_its_ttl() -> None:
    with FakeProvider(key_ttl=0.3) as p:
        first = call(p.send_url, {"a": 1}, key="k")[2]["id"]
        assert call(p.send_url, {"a": 1}, key="k")[2] == {"id": first, "duplicate": True}
        time.sleep(0.35)
        second = call(p.send_url, {"a": 1}, key="k")[2]
        assert second["duplicate"] is False and second["id"] != first
        assert p.accepted_ids_for("k") == [first, second["id"]]
        # remembered again from the new effect on
        assert call(p.send_url, {"a": 1}, key="k")[2] == {"id": second["id"], "duplicate": True}


def test_the_list_pages_through_a_window(provider: FakeProvider) -> None:
    start = time.time()
    ids = [provider.plant(f"k{i}", at=start + i) for i in range(5)]
    provider.plant("late", at=start + 100)
    seen: list[str] = []
    after = ""
    while True:
        query = f"?since={start}&until={start + 10}&limit=2{after}"
        status, _, page = call(provider.list_url + query, method="GET")
        assert status == 200
        seen += [record["id"] for record in page["data"]]
        assert {record["idempotency_key"] for record in page["data"]} <= {f"k{i}" for i in range(5)}
        if not page["has_more"]:
            break
        after = f"&starting_after={page['data'][-1]['id']}"
    assert seen == ids
    assert call(provider.list_url + "?limit=x", method="GET")[0] == 400


def test_search_finds_effects_by_a_payload_field(transport: Transport) -> None:
    with FakeProvider(key_header=None, transport=transport) as p:
        call(p.send_url, {"to": "a", "custom_args": {"denpyo_key": "k1"}})
        call(p.send_url, {"to": "b", "custom_args": {"denpyo_key": "k2"}})
        status, _, found = call(p.search_url + "?custom_args.denpyo_key=k2", method="GET")
        assert status == 200 and [e["id"] for e in found["data"]] == [p.accepted()[1]["id"]]
        assert call(p.search_url + "?custom_args.denpyo_key=k3", method="GET")[2] == {"data": []}


def test_plant_and_forget(provider: FakeProvider) -> None:
    remote_id = provider.plant("k", remote_id="ch_1", payload={"amount": 5})
    assert remote_id == "ch_1" and provider.accepted_ids_for("k") == ["ch_1"]
    assert provider.forget("k") == 1 and provider.accepted() == []


def _wait(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m denpyo.testing wait …`, as a page's session runs it."""
    command = [sys.executable, "-m", "denpyo.testing", "wait", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_wait_returns_once_the_server_answers(provider: FakeProvider) -> None:
    done = _wait(provider.url)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    done = _wait(provider.url + "/no-such-page")  # any HTTP answer will do
    assert done.returncode == 0, done.stderr


def test_wait_gives_up_when_nothing_answers() -> None:
    from conftest import free_port

    done = _wait(f"http://127.0.0.1:{free_port()}", "--timeout", "0.5")
    assert done.returncode == 1 and "did not answer" in done.stderr, done


def test_wait_accepted_returns_once_the_provider_has_that_many_calls(
    provider: FakeProvider,
) -> None:
    def send() -> None:
        for n in range(3):
            time.sleep(0.3)
            call(provider.send_url, {"n": n}, key=f"k{n}")

    sender = threading.Thread(target=send)
    sender.start()
    done = _wait(provider.url, "--accepted", "3")
    sender.join()
    assert done.returncode == 0, done.stderr
    assert provider.stats().accepted == 3
    done = _wait(provider.url, "--accepted", "4", "--timeout", "0.5")  # none comes
    assert done.returncode == 1 and "did not accept 4 calls" in done.stderr, done
