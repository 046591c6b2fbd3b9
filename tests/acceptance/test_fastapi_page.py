"""The FastAPI page (docs/how-to/fastapi.md) run as written, on SQLite (the app's
default, a file beside it) and on PostgreSQL (the page's `export DATABASE_URL`, to
a fresh database): the example's app.py in a fresh folder, the page's sessions in
one bash, the app and the provider on free ports instead of 8000 and 8025. The
install lines are left out (this environment has them all)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import free_ports
from doc_pages import commands, named, run_app_session, table_row

ROOT = Path(__file__).resolve().parents[2]
PAGE = "how-to/fastapi.md"


def _run(folder: Path, database: str | None) -> dict[str, list[str]]:
    """The page's sessions, with `DATABASE_URL` exported first when `database` is
    given; what each command printed, by command (a command run twice, twice)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("aiosqlite")
    shutil.copy2(ROOT / "examples" / "fastapi_app" / "app.py", folder / "app.py")
    app = free_ports(2)
    mail = app + 1
    page = named(PAGE, "run")
    [export] = [c for c in commands(page["postgresql"]) if c.startswith("export ")]
    # the app's MAIL_URL default is the page's port 8025; here the provider's is another
    return run_app_session(
        folder,
        commands(page["session"]) + commands(page["worker"]),
        ports={"8000": app, "8025": mail},
        database=database,
        export=export,
        env={"MAIL_URL": f"http://127.0.0.1:{mail}/send", "DATABASE_URL": None},
    )


def _json(text: str) -> dict[str, object]:
    return dict(json.loads(text))


def _check(said: dict[str, list[str]]) -> None:
    orders = [text for step, texts in said.items() if "/orders -H" in step for text in texts]
    assert [_json(text).get("order_id") for text in orders] == ["42", None, "44"], orders
    assert _json(orders[1]) == {"detail": "the amount must be positive"}
    [sent] = said["curl -s localhost:8000/orders/42/invoice-email"]
    assert _json(sent)["status"] == "synced" and _json(sent)["remote_id"], sent
    [none] = said["curl -s localhost:8000/orders/43/invoice-email"]
    assert _json(none) == {"detail": "no invoice email for this order"}
    [apart] = said["curl -s localhost:8000/orders/44/invoice-email"]
    assert _json(apart)["status"] == "synced", apart
    [status] = said["denpyo --app app:ledger status"]
    totals = table_row(status, "all")
    assert totals["synced"] == totals["total"] == 2, status
    [stats] = said["curl -s localhost:8025/stats"]
    assert (_json(stats)["accepted"], _json(stats)["duplicates"]) == (2, 0), stats


def test_the_fastapi_page_runs_as_written_on_sqlite(tmp_path: Path) -> None:
    said = _run(tmp_path, None)
    _check(said)
    assert (tmp_path / "shop.db").exists()


def test_the_fastapi_page_runs_as_written_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    said = _run(tmp_path, postgres_url)
    _check(said)
    assert not (tmp_path / "shop.db").exists()
