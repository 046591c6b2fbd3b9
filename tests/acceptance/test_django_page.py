"""The Django page (docs/how-to/django.md) run as written, on SQLite (the example's
default, shop.db beside manage.py) and on PostgreSQL (the page's `export
DATABASE_URL`, to a fresh database): examples/django_shop copied into a fresh
folder, the page's session in one bash, the site and the provider on free ports
instead of 8000 and 8025. The install lines are left out (this environment has
them). Then the admin, as a signed-in staff user sees it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_ports
from doc_pages import commands, named, run_app_session, table_row

ROOT = Path(__file__).resolve().parents[2]
PAGE = "how-to/django.md"
ADMIN = """
import django
django.setup()
from django.contrib.auth.models import User
from django.test import Client
client = Client()
client.force_login(User.objects.create_superuser("admin", "admin@example.com", "x"))
page = client.get("/admin/denpyo/submission/", HTTP_HOST="localhost")
print(page.status_code, "order:1" in page.content.decode(), "order:2" in page.content.decode())
"""


def _run(folder: Path, database: str | None) -> dict[str, list[str]]:
    """The page's session, with `DATABASE_URL` exported first when `database` is
    given; what each command printed, by command."""
    pytest.importorskip("django")
    shutil.copytree(
        ROOT / "examples" / "django_shop",
        folder / "examples" / "django_shop",
        ignore=shutil.ignore_patterns("__pycache__", "*.db"),
    )
    site = free_ports(2)
    mail = site + 1
    page = named(PAGE, "run")
    [export] = [c for c in commands(page["postgresql"]) if c.startswith("export ")]
    # the channel's MAIL_URL default is the page's port 8025; here the provider's is another
    return run_app_session(
        folder,
        commands(page["session"]),
        ports={"8000": site, "8025": mail},
        database=database,
        export=export,
        timeout=240,
        env={
            "MAIL_URL": f"http://127.0.0.1:{mail}",
            "DATABASE_URL": None,
            "DJANGO_SETTINGS_MODULE": None,
        },
    )


def _check(folder: Path, said: dict[str, list[str]], database: str | None) -> None:
    orders = [text for step, texts in said.items() if "/orders -d" in step for text in texts]
    assert [json.loads(text) for text in orders] == [
        {"order_id": 1},
        {"detail": "the total must be positive"},
    ], orders
    [sent] = said["curl -s localhost:8000/orders/1/invoice-email"]
    assert json.loads(sent)["status"] == "synced" and json.loads(sent)["remote_id"], sent
    [none] = said["curl -s localhost:8000/orders/2/invoice-email"]
    assert json.loads(none) == {"detail": "no invoice email for this order"}
    [stats] = said["curl -s localhost:8025/stats"]
    assert (json.loads(stats)["accepted"], json.loads(stats)["duplicates"]) == (1, 0), stats
    [status] = said["denpyo --app shop_site.denpyo_app:ledger status"]
    totals = table_row(status, "all")
    assert totals["synced"] == totals["total"] == 1, status
    project = folder / "examples" / "django_shop"
    assert (project / "shop.db").exists() == (database is None)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "shop_site.settings"}
    env.pop("DATABASE_URL", None)
    if database is not None:
        env["DATABASE_URL"] = database
    admin = subprocess.run(
        [sys.executable, "-c", ADMIN],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert admin.stdout.split() == ["200", "True", "False"], admin.stdout + admin.stderr
    [tested] = said["python manage.py test shop"]
    assert "Ran 2 tests" in tested and "\nOK" in tested, tested


def test_the_django_page_runs_as_written_on_sqlite(tmp_path: Path) -> None:
    _check(tmp_path, _run(tmp_path, None), None)


def test_the_django_page_runs_as_written_on_postgresql(
    tmp_path: Path, postgres_empty_url: str
) -> None:
    _check(tmp_path, _run(tmp_path, postgres_empty_url), postgres_empty_url)
