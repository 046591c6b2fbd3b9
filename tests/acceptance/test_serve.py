"""`denpyo dashboard` and `denpyo worker --metrics-port` in subprocesses: where they
listen, how one signs in, and what Prometheus scrapes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import denpyo
from conftest import free_port
from denpyo.domain.limits import IDLE_CONNECTION_SECONDS
from waiting import wait_until

APP = """
import os

import denpyo

ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])


@ledger.channel("mail", max_attempts=1)
def send(sub):
    if sub.payload.get("reject"):
        raise denpyo.Rejected("550 unknown mailbox")
    return "m-" + sub.key
"""


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/serve.db"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
    return url


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "denpyo.cli", *args],
        env={**os.environ, "COLUMNS": "200", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(url: str, **kwargs: object) -> httpx.Response:
    """The first answer from `url`, once the process serving it listens."""
    answers: list[httpx.Response] = []

    def answered() -> bool:
        try:
            answers.append(httpx.get(url, timeout=2, **kwargs))  # type: ignore[arg-type]
        except httpx.TransportError:
            return False
        return True

    wait_until(answered, f"an answer from {url}", every=0.1)
    return answers[-1]


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_dashboard_makes_up_a_token_prints_it_and_listens_on_loopback(
    db: str, stopped: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    env = {"DENPYO_DASHBOARD_TOKEN": ""}
    proc = start(["--db", db, "dashboard", "--port", str(port)], env)
    stopped.append(proc)
    base = f"http://127.0.0.1:{port}"
    assert wait_for(f"{base}/metrics").status_code == 401
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    token = re.search(r"sign in with the token: (\S+)", err)
    assert token, err
    assert f"dashboard on http://127.0.0.1:{port}/" in err


def test_dashboard_takes_its_token_from_the_environment(
    db: str, stopped: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    proc = start(
        ["--db", db, "dashboard", "--port", str(port), "--read-only"],
        {"DENPYO_DASHBOARD_TOKEN": "from-the-env-123"},
    )
    stopped.append(proc)
    base = f"http://127.0.0.1:{port}"
    wait_for(f"{base}/login")
    authorized = {"authorization": "Bearer from-the-env-123"}
    assert httpx.get(f"{base}/metrics", headers=authorized).status_code == 200
    page = httpx.get(f"{base}/", headers={**authorized, "accept": "text/html"})
    assert page.status_code == 200 and "read-only" in page.text
    refused = httpx.post(f"{base}/submissions/1/retry", headers=authorized, data={"note": "n"})
    assert refused.status_code == 403
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "sign in with the token" not in err  # not printed: the operator chose it


def test_dashboard_on_a_port_in_use_says_so_in_one_line(db: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "denpyo.cli",
                "--db",
                db,
                "dashboard",
                "--port",
                str(port),
                "--token",
                "a-long-enough-token",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: cannot serve the dashboard on 127.0.0.1:{port}: ")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_dashboard_signs_people_in_from_the_users_file_and_the_proxy(
    db: str, tmp_path: Path, stopped: list[subprocess.Popen[str]]
) -> None:
    from denpyo.engine import people

    users = tmp_path / "users.json"
    _, token = people.add(users, "alice", "operator")
    people.add(users, "pat", "approver", token=False)
    key = tmp_path / "session.key"
    key.write_text("a-session-key-of-32-bytes-or-so\n")
    port = free_port()
    proc = start(
        [
            "--db",
            db,
            "dashboard",
            "--port",
            str(port),
            "--users",
            str(users),
            "--trusted-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.1",
            "--session-key-file",
            str(key),
        ],
        {"DENPYO_DASHBOARD_TOKEN": ""},
    )
    stopped.append(proc)
    base = f"http://127.0.0.1:{port}"
    assert wait_for(f"{base}/metrics").status_code == 401
    mine = {"authorization": f"Bearer {token}", "accept": "text/html"}
    page = httpx.get(f"{base}/", headers=mine)
    assert page.status_code == 200 and ">operator</span>" in page.text
    proxied = httpx.get(f"{base}/", headers={"x-forwarded-user": "pat", "accept": "text/html"})
    assert proxied.status_code == 200 and ">approver</span>" in proxied.text
    assert (
        httpx.get(f"{base}/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "sign in with the token" not in err  # none made up: the users file signs in
    assert f"people sign in with their own tokens from {users}" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--token", "password"], "secrets.token_urlsafe(24)"),
        (["--token", "password12345678", "--host", "0.0.0.0"], "runs, repeats or common words"),
        (["--trusted-header", "X-Forwarded-User"], "--trusted-proxy"),
        (["--token", "correct-horse-battery", "--proxy-role", "boss"], "no role named 'boss'"),
        (["--users", "no-such-users.json"], "no users file at no-such-users.json"),
    ],
)
def test_dashboard_refuses_a_weak_or_half_configuration_in_one_line(
    db: str, tmp_path: Path, args: list[str], message: str
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "denpyo.cli",
            "--db",
            db,
            "dashboard",
            "--port",
            str(free_port()),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_worker_serves_its_metrics(
    db: str, tmp_path: Path, stopped: list[subprocess.Popen[str]]
) -> None:
    (tmp_path / "serve_test_app.py").write_text(APP)
    with denpyo.Ledger(db) as ledger:
        ledger.channel("mail")(lambda sub: None)  # to enqueue; the worker sends
        for i in range(4):
            ledger.enqueue("mail", f"k{i}", {"reject": i == 3})
    port = free_port()
    env = {
        "DENPYO_DATABASE_URL": db,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    proc = start(
        [
            "--app",
            "serve_test_app:ledger",
            "worker",
            "--poll-interval",
            "0.05",
            "--metrics-port",
            str(port),
        ],
        env,
    )
    stopped.append(proc)
    url = f"http://127.0.0.1:{port}/metrics"
    expected = [
        'denpyo_calls_total{channel="mail",outcome="synced"} 3.0',
        'denpyo_calls_total{channel="mail",outcome="rejected"} 1.0',
        'denpyo_call_duration_seconds_count{channel="mail"} 4.0',
        # Raised once the rejection is recorded, a commit after the call is counted.
        'denpyo_alerts_total{channel="mail",reason="rejected"} 1.0',
        'denpyo_needs_person{channel="mail"}',
    ]
    texts = [""]

    def all_counted() -> bool:
        texts.append(wait_for(url).text)
        return all(line in texts[-1] for line in expected)

    def found() -> list[str]:
        return [line for line in expected if line in texts[-1]]

    wait_until(all_counted, f"the worker's metrics: {expected}", moving=found, every=0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"metrics on http://127.0.0.1:{port}/metrics" in err


CROWD = 300
"""Silent connections opened at once: more than `MAX_IDLE_CONNECTIONS` wait."""


def threads_of(proc: subprocess.Popen[str]) -> int:
    status = Path(f"/proc/{proc.pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    assert found, status
    return int(found[1])


def crowd_is_bounded(proc: subprocess.Popen[str], port: int, answers: Callable[[], None]) -> None:
    """`CROWD` connections that send nothing: the threads stay few, a request is still
    answered while they are open, and each is closed by the server within the idle
    timeout (with a generous margin)."""
    answers()
    before = threads_of(proc)
    crowd = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(CROWD)]
    try:
        answers()  # accepted after all of them: each of them was accepted first
        assert threads_of(proc) <= before + 10
        for silent in crowd:
            silent.settimeout(IDLE_CONNECTION_SECONDS + 30)
            with contextlib.suppress(ConnectionResetError):
                assert silent.recv(1) == b""
        answers()
    finally:
        for silent in crowd:
            silent.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads read from /proc")
def test_silent_connections_are_bounded_and_closed(
    db: str, tmp_path: Path, stopped: list[subprocess.Popen[str]]
) -> None:
    (tmp_path / "serve_test_app.py").write_text(APP)
    metrics_port, dashboard_port = free_port(), free_port()
    env = {
        "DENPYO_DATABASE_URL": db,
        "DENPYO_DASHBOARD_TOKEN": "crowd-token-12345678",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    worker = start(
        ["--app", "serve_test_app:ledger", "worker", "--metrics-port", str(metrics_port)], env
    )
    dashboard = start(["--db", db, "dashboard", "--port", str(dashboard_port)], env)
    stopped.extend([worker, dashboard])
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    page = f"http://127.0.0.1:{dashboard_port}/metrics"
    authorized = {"authorization": "Bearer crowd-token-12345678"}

    def scraped() -> None:
        assert "denpyo_store_up 1.0" in wait_for(metrics).text

    def paged() -> None:
        assert wait_for(page, headers=authorized).status_code == 200

    crowd_is_bounded(worker, metrics_port, scraped)
    crowd_is_bounded(dashboard, dashboard_port, paged)
