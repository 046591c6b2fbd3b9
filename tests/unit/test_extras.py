"""Each optional part names its extra when its driver is missing; the core imports
without any of them. Run in a fresh interpreter where the drivers cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCKED = (
    "psycopg",
    "psycopg_pool",
    "pymysql",
    "aiohttp",
    "yarl",
    "aio_pika",
    "aiormq",
    "nats",
    "starlette",
    "jinja2",
    "prometheus_client",
    "argon2",
    "pyarrow",
    "duckdb",
    "stripe",
    "sendgrid",
    "python_http_client",
    "twilio",
)


def _without_extras(code: str) -> subprocess.CompletedProcess[str]:
    blocker = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in BLOCKED)
    return subprocess.run(
        [sys.executable, "-c", blocker + textwrap.dedent(code)], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("code", "extra"),
    [
        ("denpyo.Ledger('postgresql://u@127.0.0.1/db')", "postgresql"),
        ("denpyo.Ledger('mysql://u@127.0.0.1/db')", "mysql"),
        ("import denpyo.channels.http", "http"),
        ("import denpyo.channels.rabbitmq", "rabbitmq"),
        ("import denpyo.channels.nats", "nats"),
        ("import denpyo.channels.stripe", "stripe"),
        ("import denpyo.channels.sendgrid", "sendgrid"),
        ("import denpyo.channels.twilio", "twilio"),
        ("import denpyo.web", "dashboard"),
        ("import denpyo.metrics", "dashboard"),
        ("import denpyo.testing; denpyo.testing.FakeProvider(transport='aiohttp')", "http"),
        ("import denpyo.archive; denpyo.archive.Archive('archive')", "archive"),
    ],
)
def test_a_part_without_its_extra_says_which_to_install(code: str, extra: str) -> None:
    done = _without_extras(f"""
        import denpyo
        try:
            {code}
        except denpyo.ConfigurationError as exc:
            print(exc)
        """)
    assert done.returncode == 0, done.stderr
    assert f"pip install 'denpyo[{extra}]'" in done.stdout


def test_the_core_works_on_sqlite_without_any_extra(tmp_path: object) -> None:
    done = _without_extras(f"""
        import denpyo, denpyo.cli
        with denpyo.Ledger('sqlite:///{tmp_path}/core.db') as ledger:
            ledger.migrate()
            ledger.channel('c')(lambda sub: 'r-' + sub.key)
            print(ledger.submit('c', 'k', {{'n': 1}}).remote_id)
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "r-k"


def test_the_fake_provider_serves_on_the_standard_library_without_aiohttp() -> None:
    done = _without_extras("""
        import json, urllib.request
        from denpyo.testing import FakeProvider
        with FakeProvider() as provider:
            request = urllib.request.Request(
                provider.send_url, data=b"{}", headers={"Idempotency-Key": "k"}
            )
            with urllib.request.urlopen(request, timeout=5) as reply:
                print(reply.status, json.loads(reply.read())["duplicate"], provider.accepted_keys())
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200 False {'k': 1}"
