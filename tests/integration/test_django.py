"""denpyo.contrib.django in the example shop (examples/django_shop), on fresh
real SQLite, PostgreSQL and MariaDB databases: `manage.py migrate` makes the same
schema as `denpyo migrate` and either can follow the other; enqueue joins
`transaction.atomic()`; a worker sends what committed; the admin only reads."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

django = pytest.importorskip("django")

import denpyo  # noqa: E402
from conftest import driver_connection  # noqa: E402
from denpyo.channels.http import HttpChannel  # noqa: E402
from denpyo.store import dialect_of  # noqa: E402
from denpyo.store.dialects import DIALECTS  # noqa: E402
from denpyo.store.queries import load_migrations  # noqa: E402
from denpyo.testing import FakeProvider  # noqa: E402

SHOP = Path(__file__).resolve().parents[2] / "examples" / "django_shop"
"""The example shop: its settings, its app (`shop`) and its channel."""


@pytest.fixture(scope="session")
def django_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Django set up once, as the shop's `manage.py test` does, with its settings;
    its database is a SQLite file of the session (yielded) unless a test picks another.
    Its ready() registers the shop's channel on the session's ledger; each test's
    ledger (`on_database`) starts without it."""
    import pymysql
    from django.test.utils import setup_test_environment, teardown_test_environment

    pymysql.install_as_MySQLdb()  # Django's MySQL backend, on PyMySQL
    home = f"sqlite:///{tmp_path_factory.mktemp('django')}/project.db"
    sys.path.insert(0, str(SHOP))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DJANGO_SETTINGS_MODULE", "shop_site.settings")
        env.setenv("DATABASE_URL", home)
        django.setup()
        setup_test_environment()  # the test client's host allowed, as a test run does
        use_database(home)
        yield home
        teardown_test_environment()
    sys.path.remove(str(SHOP))


def checkout(email: str, total: int) -> Any:
    """An order through the shop's view, as its page's `curl` posts one: the view
    enqueues its invoice email in the order's transaction (a total of 0 is declined
    after the enqueue: both roll back)."""
    from django.test import Client

    return Client().post("/orders", {"email": email, "total": total})


def django_database(url: str) -> dict[str, Any]:
    """The DATABASES entry a Django project would write for a denpyo URL."""
    if url.startswith("sqlite:///"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}
    parts = urlsplit(url)
    engine = "postgresql" if parts.scheme.startswith("postgres") else "mysql"
    return {
        "ENGINE": f"django.db.backends.{engine}",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def use_database(url: str) -> None:
    """Point Django's default database at `url`, as a test runner's switch to the
    test database does: connections and caches of the previous one are dropped."""
    from django.conf import settings
    from django.contrib.contenttypes.models import ContentType
    from django.db import connections

    connections.close_all()
    settings.DATABASES = {"default": django_database(url)}
    with contextlib.suppress(AttributeError):
        del connections["default"]
    connections._settings = None  # read DATABASES again, with Django's defaults
    connections.__dict__.pop("settings", None)
    ContentType.objects.clear_cache()


@contextlib.contextmanager
def on_database(home: str, url: str) -> Iterator[str]:
    """The project on `url`, then back home; the process's ledger starts anew,
    without the channels of an earlier test, and is closed after."""
    import denpyo.contrib.django as contrib

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(contrib, "_ledger", None)
        use_database(url)
        try:
            yield url
        finally:
            contrib.close_ledger()  # its channels' HTTP sessions too
            use_database(home)


@pytest.fixture
def project(django_project: str, empty_url: str) -> Iterator[str]:
    """The project on a fresh database with no tables at all; yields its URL."""
    with on_database(django_project, empty_url) as url:
        yield url


def migrate(*args: str) -> str:
    from django.core.management import call_command

    out = StringIO()
    call_command("migrate", *args, verbosity=1, stdout=out)
    return out.getvalue()


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Ask the database on a connection of its own, as a person would."""
    conn = driver_connection(dialect_of(url), url)
    try:
        cursor = conn.cursor()
        cursor.execute(sql)
        found = [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        conn.commit()
        return found
    finally:
        conn.close()


def versions(url: str) -> list[int]:
    return [row[0] for row in query(url, "SELECT version FROM denpyo_schema_version ORDER BY 1")]


def schema_of(url: str) -> list[tuple[Any, ...]]:
    """What the database says denpyo's tables, indexes, triggers and functions are."""
    if url.startswith("sqlite"):
        return sorted(
            query(
                url, "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'denpyo%'"
            )
        )
    if url.startswith("postgresql"):
        return sorted(
            query(
                url,
                "SELECT table_name, column_name, data_type, is_nullable, column_default "
                "FROM information_schema.columns WHERE table_name LIKE 'denpyo%'",
            )
            + query(
                url,
                "SELECT tablename, indexname, indexdef FROM pg_indexes "
                "WHERE tablename LIKE 'denpyo%'",
            )
            + query(
                url,
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                "FROM pg_constraint WHERE conrelid::regclass::text LIKE 'denpyo%'",
            )
            + query(
                url,
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname LIKE 'denpyo%'",
            )
            + query(url, "SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'denpyo%'"),
            key=repr,
        )
    tables = [row[0] for row in query(url, "SHOW TABLES LIKE 'denpyo%'")]
    created = [query(url, f"SHOW CREATE TABLE {table}")[0] for table in sorted(tables)]
    return [(name, re.sub(r" AUTO_INCREMENT=\d+", "", sql)) for name, sql in created]


LATEST = load_migrations("sqlite")[-1][0]


# -- migrations -----------------------------------------------------------------------


def test_migrate_creates_the_schema_denpyo_migrate_makes(project: str, db_url: str) -> None:
    """The same tables, indexes, constraints (and on PostgreSQL triggers) as `denpyo
    migrate`, recorded the same way: `denpyo migrate` afterwards has nothing to do."""
    from django.db.migrations.exceptions import IrreversibleError

    output = migrate()
    assert "Applying denpyo.0001_initial... OK" in output
    assert versions(project) == list(range(1, LATEST + 1))
    assert schema_of(project) == schema_of(db_url)  # db_url: set up by `denpyo migrate`
    with denpyo.Ledger(project) as ledger:
        assert ledger.migrate() == []
    with pytest.raises(IrreversibleError):  # denpyo has no down migrations
        migrate("denpyo", "zero")
    assert versions(project) == list(range(1, LATEST + 1))


def test_migrate_on_a_database_denpyo_migrate_set_up_runs_no_sql(
    django_project: str, db_url: str
) -> None:
    """A project adopting the app on a database already migrated by `denpyo
    migrate`: Django records its migrations; no script runs again."""
    before = schema_of(db_url)
    with on_database(django_project, db_url):
        output = migrate()
        assert "Applying denpyo.0005_supersedes_index... OK" in output
        assert versions(db_url) == list(range(1, LATEST + 1))
        assert schema_of(db_url) == before
        assert migrate().strip().endswith("No migrations to apply.")


def test_denpyo_migrate_and_manage_py_migrate_interleave(project: str, db_url: str) -> None:
    """Django takes the schema to 3, `denpyo migrate` to the latest, then Django
    records the rest without running it; the result is the one `denpyo migrate` makes."""
    migrate("denpyo", "0003")
    assert versions(project) == [1, 2, 3]
    with denpyo.Ledger(project) as ledger:
        assert ledger.migrate() == list(range(4, LATEST + 1))
    migrate()
    assert versions(project) == list(range(1, LATEST + 1))
    assert schema_of(project) == schema_of(db_url)


def test_a_later_denpyo_migration_applies_after_django(
    project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A denpyo release with a new migration: `denpyo migrate` applies just that one
    on a database Django set up."""
    import denpyo.store.sql_store as sql_store

    migrate()
    script = "CREATE TABLE denpyo_later (id INTEGER PRIMARY KEY)"
    with denpyo.Ledger(project) as ledger:
        later = (*load_migrations(ledger.store.dialect), (LATEST + 1, script))
        monkeypatch.setattr(sql_store, "load_migrations", lambda dialect: later)
        assert ledger.migrate() == [LATEST + 1]
    assert versions(project) == list(range(1, LATEST + 2))


def test_every_denpyo_migration_has_a_django_migration(django_project: str) -> None:
    """A new .sql migration needs its Django twin (an ApplySchema of its number),
    and the models need no migration Django would make."""
    from django.core.management import call_command
    from django.db.migrations.loader import MigrationLoader

    from denpyo.contrib.django.schema import ApplySchema

    loader = MigrationLoader(None, ignore_no_migrations=True)
    applied = sorted(
        op.version
        for (app, _), migration in loader.disk_migrations.items()
        if app == "denpyo"
        for op in migration.operations
        if isinstance(op, ApplySchema)
    )
    opened_by_url = [name for name, record in DIALECTS.items() if record.schemes]
    for dialect in opened_by_url:  # a layout's migrations are made whole, never one by one
        assert applied == [version for version, _ in load_migrations(dialect)]
    call_command("makemigrations", "denpyo", check=True, dry_run=True, verbosity=0)


def test_sqlmigrate_shows_the_packaged_sql(django_project: str) -> None:
    from django.core.management import call_command

    out = StringIO()
    call_command("sqlmigrate", "denpyo", "0001", stdout=out)
    sql = out.getvalue()
    assert "CREATE TABLE denpyo_submissions" in sql
    assert "INSERT INTO denpyo_schema_version (version) VALUES (1)" in sql


# -- enqueue inside atomic() -----------------------------------------------------------


@pytest.fixture
def shop(project: str, provider: FakeProvider) -> denpyo.Ledger:
    """The migrated project, its ledger with an invoice-email channel on the fake
    provider."""
    from denpyo.contrib.django import get_ledger

    migrate()
    ledger = get_ledger()
    mail = HttpChannel(provider.send_url, lookup_url=provider.lookup_url)
    ledger.channel("invoice-email", verify=mail.verifier)(mail.send)
    return ledger


def test_enqueue_rolls_back_with_the_atomic_block(shop: denpyo.Ledger, project: str) -> None:
    from shop.models import Order

    declined = checkout("a@example.com", 0)
    assert declined.status_code == 400 and "positive" in declined.json()["detail"]
    assert Order.objects.count() == 0
    assert query(project, "SELECT COUNT(*) FROM denpyo_submissions")[0][0] == 0


def test_enqueue_commits_with_the_atomic_block_and_a_worker_sends_it(
    shop: denpyo.Ledger, project: str, provider: FakeProvider
) -> None:
    from shop.models import Order

    order = Order.objects.get(pk=checkout("a@example.com", 100).json()["order_id"])
    assert Order.objects.count() == 1
    sub = shop.get("invoice-email", f"order:{order.pk}")
    assert sub is not None and sub.status is denpyo.Status.REQUESTING and sub.attempts == 0

    report = shop.work(until_idle=True, poll_interval=0.05)
    assert report.attempted == 1
    sub = shop.get("invoice-email", f"order:{order.pk}")
    assert sub is not None and sub.status is denpyo.Status.SYNCED and sub.remote_id
    assert provider.accepted_keys() == {sub.idempotency_key: 1}
    assert provider.accepted()[0]["payload"] == {"to": "a@example.com", "total": 100}


@pytest.mark.parametrize("backend", ["postgresql"])
def test_on_postgresql_the_commit_wakes_the_workers(shop: denpyo.Ledger, project: str) -> None:
    """NOTIFY is sent in the block's transaction, so a worker hears it at commit
    (and never for a row rolled back)."""
    import psycopg
    from django.db import connection, transaction

    with psycopg.connect(project, autocommit=True) as listener:
        listener.execute("LISTEN denpyo")
        with transaction.atomic():
            shop.enqueue("invoice-email", "order:1", {}, conn=connection)
            assert list(listener.notifies(timeout=0.3)) == []
        assert len(list(listener.notifies(timeout=5.0, stop_after=1))) == 1


def test_enqueue_joins_a_nested_atomic_block(shop: denpyo.Ledger, project: str) -> None:
    """A savepoint rolled back takes its row with it; the outer block keeps its own.
    (`connections["default"]` works as `connection` does.)"""
    from django.db import connection, connections, transaction

    with transaction.atomic():
        shop.enqueue("invoice-email", "order:1", {}, conn=connection)
        with contextlib.suppress(RuntimeError), transaction.atomic():
            shop.enqueue("invoice-email", "order:2", {}, conn=connections["default"])
            raise RuntimeError("inner block fails")
    keys = query(project, "SELECT s.key FROM denpyo_submissions s ORDER BY s.key")
    assert keys == [("order:1",)]


def test_enqueue_of_a_recorded_key_in_the_block_returns_its_row(
    shop: denpyo.Ledger, project: str
) -> None:
    """The same key again is the same row; with another payload, KeyReused, and the
    block carries on (the database raised nothing that aborts it)."""
    from django.db import connection, transaction
    from shop.models import Order

    with transaction.atomic():
        first = shop.enqueue("invoice-email", "order:1", {"n": 1}, conn=connection)
        again = shop.enqueue("invoice-email", "order:1", {"n": 1}, conn=connection)
        with pytest.raises(denpyo.KeyReused):
            shop.enqueue("invoice-email", "order:1", {"n": 2}, conn=connection)
        Order.objects.create(email="a@example.com", total=1)
    assert again.id == first.id
    assert query(project, "SELECT COUNT(*) FROM denpyo_submissions")[0][0] == 1
    assert Order.objects.count() == 1


@pytest.mark.parametrize("backend", ["mysql"])
def test_pymysql_as_djangos_driver_keeps_one_copy_of_its_errors(project: str) -> None:
    """Django imports `MySQLdb.converters` (PyMySQL installed as MySQLdb); the app
    keeps that from running PyMySQL's modules twice, so the store still knows the
    errors PyMySQL raises and wraps them."""
    import pymysql
    from django.db import connection

    connection.ensure_connection()  # Django's MySQL backend is loaded
    assert pymysql.err is sys.modules["pymysql.err"] is sys.modules["MySQLdb.err"]
    with denpyo.Ledger(project) as ledger:
        ledger.channel("c")(lambda sub: "r")
        with pytest.raises(denpyo.SchemaError, match="denpyo migrate"):
            ledger.enqueue("c", "k", {})  # no tables yet


def test_the_ledger_follows_the_settings_to_another_database(
    shop: denpyo.Ledger, project: str, tmp_path: Any
) -> None:
    """After Django switches databases (as its test runner does), get_ledger() opens
    one on the new database, with the channels registered on the old one."""
    from denpyo.contrib.django import close_ledger, database_url, get_ledger

    assert get_ledger() is shop and shop.url == database_url()
    other = f"sqlite:///{tmp_path}/other.db"
    use_database(other)
    migrate()
    moved = get_ledger()
    assert moved is not shop and moved.url == other
    assert set(moved.channels) == {"invoice-email"}
    close_ledger()
    reopened = get_ledger()
    assert reopened is not moved and set(reopened.channels) == {"invoice-email"}


def test_denpyo_database_url_in_the_settings_comes_first(django_project: str) -> None:
    from django.test import override_settings

    from denpyo.contrib.django import database_url

    with override_settings(DENPYO_DATABASE_URL="postgresql://app@db/ledger"):
        assert database_url() == "postgresql://app@db/ledger"


# -- the admin --------------------------------------------------------------------------


@pytest.fixture
def admin_client(shop: denpyo.Ledger) -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.create_superuser("alice", "alice@example.com", None)
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_lists_filters_and_searches(admin_client: Any, shop: denpyo.Ledger) -> None:
    shop.enqueue("invoice-email", "order:1", {"to": "a@example.com"})
    shop.enqueue("invoice-email", "order:2", {"to": "b@example.com"})
    shop.work(until_idle=True, poll_interval=0.05)
    shop.enqueue("invoice-email", "order:3", {"to": "c@example.com"})

    index = admin_client.get("/admin/").content.decode()
    assert "denpyo ledger" in index and "/admin/denpyo/submission/" in index
    assert "/admin/denpyo/event/" not in index  # events are seen on their row's page

    page = admin_client.get("/admin/denpyo/submission/")
    assert page.status_code == 200
    html = page.content.decode()
    assert all(f"order:{n}" in html for n in (1, 2, 3))
    assert "By status" in html and "By channel" in html
    assert 'href="/admin/denpyo/submission/add/"' not in html

    synced = admin_client.get("/admin/denpyo/submission/?status=synced&channel=invoice-email")
    html = synced.content.decode()
    assert "order:1" in html and "order:2" in html and "order:3" not in html

    found = admin_client.get("/admin/denpyo/submission/", {"q": "order:2"}).content.decode()
    assert "order:2" in found and "order:1" not in found and "order:3" not in found


def test_the_admin_shows_a_row_with_its_history_and_changes_nothing(
    admin_client: Any, shop: denpyo.Ledger
) -> None:
    shop.enqueue("invoice-email", "order:1", {"to": "a@example.com"})
    shop.work(until_idle=True, poll_interval=0.05)
    sub = shop.get("invoice-email", "order:1")
    assert sub is not None and sub.status is denpyo.Status.SYNCED
    page = f"/admin/denpyo/submission/{sub.id}/change/"

    response = admin_client.get(page)
    assert response.status_code == 200
    html = response.content.decode()
    assert sub.idempotency_key in html and "a@example.com" in html
    for kind in ("created", "attempt", "settle"):
        assert kind in html, kind
    assert 'name="_save"' not in html  # view only

    assert admin_client.get("/admin/denpyo/submission/add/").status_code == 403
    assert admin_client.get(f"/admin/denpyo/submission/{sub.id}/delete/").status_code == 403
    assert (
        admin_client.post(f"/admin/denpyo/submission/{sub.id}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert admin_client.post(page, {"status": "failed"}).status_code == 403
    assert admin_client.get("/admin/denpyo/event/").status_code == 404  # only via its row
    after = shop.get("invoice-email", "order:1")
    assert after == sub


# -- the worker command ---------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_manage_py_denpyo_worker_sends_until_sigterm(shop: denpyo.Ledger) -> None:
    from django.core.management import call_command
    from shop.models import Order

    placed = [checkout(f"{n}@example.com", n + 1).json()["order_id"] for n in range(3)]
    orders = list(Order.objects.filter(pk__in=placed))
    returned = threading.Event()

    def stop_when_sent() -> None:
        """SIGTERM, as a deploy would send, once every row is synced (or after 30 s)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not returned.is_set():
            subs = [shop.get("invoice-email", f"order:{o.pk}") for o in orders]
            if all(s is not None and s.status is denpyo.Status.SYNCED for s in subs):
                break
            time.sleep(0.05)
        if not returned.is_set():  # the worker's handler, not the default one, gets it
            os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_when_sent)
    stopper.start()
    err = StringIO()
    try:
        call_command("denpyo_worker", poll_interval=0.05, stderr=err)
    finally:
        returned.set()
        stopper.join()
    assert "worker started on channels: invoice-email" in err.getvalue()
    assert "outcomes: synced 3" in err.getvalue()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_manage_py_denpyo_worker_without_channels_says_where_to_register_them(
    project: str,
) -> None:
    from django.core.management import CommandError, call_command

    migrate()
    with pytest.raises(CommandError, match=r"AppConfig\.ready"):
        call_command("denpyo_worker")


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("processes", [0, -1, 257])
def test_manage_py_denpyo_worker_refuses_a_count_of_processes_out_of_range(
    project: str, processes: int
) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"--processes must be from 1 to 256") as raised:
        call_command("denpyo_worker", processes=processes)
    assert raised.value.returncode == 2
    assert query(project, "SELECT name FROM sqlite_master WHERE name LIKE 'denpyo%'") == []


def test_manage_py_denpyo_worker_processes_send_every_row_once_and_stop_on_sigterm(
    tmp_path: Any, provider: FakeProvider
) -> None:
    """`denpyo_worker --processes 2` as a deploy runs it, in processes of its own: the
    children register the shop's channel in its AppConfig.ready, send every row
    once between them, and all stop cleanly on the supervisor's SIGTERM."""
    path = tmp_path / "shop.db"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "shop_site.settings",
        "DATABASE_URL": f"sqlite:///{path}",
        "MAIL_URL": provider.url,
        "PYTHONPATH": os.pathsep.join([str(SHOP), os.environ.get("PYTHONPATH", "")]),
    }
    django_command = [sys.executable, "-m", "django"]
    subprocess.run([*django_command, "migrate", "-v", "0"], env=env, cwd=tmp_path, check=True)
    with denpyo.Ledger(f"sqlite:///{path}") as ledger:
        ledger.channel("invoice-email")(lambda sub: None)
        ledger.enqueue_many("invoice-email", [(f"order:{n}", {"n": n}) for n in range(40)])
    worker = subprocess.Popen(
        [*django_command, "denpyo_worker", "--processes", "2", "--poll-interval", "0.05"],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    said: list[str] = []  # the supervisor's and the children's lines, as they come
    lines = worker.stderr
    reader = threading.Thread(target=lambda: said.extend(iter(lines.readline, "")))
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both children up (a child still starting
            # when SIGTERM comes exits at once, rightly, with nothing to drain), all sent
            started = sum("worker started on channels" in line for line in list(said))
            rows = query(
                f"sqlite:///{path}",
                "SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'",
            )
            if started == 2 and rows[0][0] == 40:
                break
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
        reader.join(10)
        lines.close()
    stderr = "".join(said)
    assert worker.returncode == 0, stderr
    assert "worker process 0 started" in stderr and "worker process 1 started" in stderr
    assert stderr.count("worker stopped:") == 2, stderr  # each child drained and said so
    stats = provider.stats()
    assert stats.distinct_keys == 40 and stats.duplicates == 0 and stats.requests == 40, stats


# -- the core without Django ------------------------------------------------------------


def test_the_core_imports_without_django() -> None:
    code = (
        "import sys; sys.modules['django'] = None\n"
        "import denpyo, denpyo.cli, denpyo.engine.ledger as l\n"
        "assert l._dbapi_connection(None) is None\n"
        "assert 'django' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
