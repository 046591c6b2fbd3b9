"""An order endpoint that writes the order and enqueues its invoice email in one
transaction, with the worker running beside the app.

    uvicorn app:app           # on SQLite, ./shop.db; the mail API on :8025
    DATABASE_URL=postgresql://postgres@127.0.0.1/shop uvicorn app:app
    WORKER_IN_APP=0 uvicorn app:app     # the worker apart:
    denpyo --app app:ledger worker

`POST /orders {"order_id": "42", "email": "a@example.com", "amount": 1200}`
commits both rows or neither: an order that fails validation after the email
was enqueued rolls the email back with it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

import denpyo
from denpyo.channels.http import HttpChannel

# By default, a file beside the app.
DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///shop.db")
MAIL_URL = os.environ.get("MAIL_URL", "http://127.0.0.1:8025/send")
# 0: the app only enqueues, and `denpyo --app app:ledger worker` sends, as a
# process of its own (one or many, for any number of web processes).
WORKER_IN_APP = os.environ.get("WORKER_IN_APP", "1") != "0"

ledger = denpyo.Ledger(DATABASE_URL)
mail = HttpChannel(url=MAIL_URL)


@ledger.channel("invoice-email", idempotent=True)
async def send_invoice(sub: denpyo.Submission) -> str | None:
    return await mail.send(sub)


class Order(BaseModel):
    order_id: str
    email: str
    amount: int  # in cents


ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
}


def async_url(url: str) -> str:
    """The ledger's database as SQLAlchemy's asyncio drivers name it: asyncpg,
    aiosqlite or aiomysql (the same file for SQLite: `sqlite:///shop.db` is
    `sqlite+aiosqlite:///shop.db`). A driver not installed is an error naming
    it when the engine is made (ModuleNotFoundError)."""
    scheme, sep, rest = url.partition("://")
    return f"{ASYNC_DRIVERS.get(scheme, scheme)}{sep}{rest}"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    engine = create_async_engine(async_url(DATABASE_URL))
    async with engine.begin() as conn:
        await conn.execute(
            text("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, email TEXT, amount INT)")
        )
    ledger.migrate()
    app.state.engine = engine
    # Sends what the requests enqueue; with WORKER_IN_APP=0, none here.
    workers = [asyncio.create_task(ledger.awork())] if WORKER_IN_APP else []
    try:
        yield
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await engine.dispose()
        ledger.close()


app = FastAPI(lifespan=lifespan)


async def session() -> AsyncIterator[AsyncSession]:
    engine: AsyncEngine = app.state.engine
    async with AsyncSession(engine) as db:
        yield db


Database = Annotated[AsyncSession, Depends(session)]


@app.post("/orders", status_code=201)
async def create_order(order: Order, db: Database) -> dict[str, object]:
    async with db.begin():  # commits at the end of the block, rolls back on any error
        await db.execute(
            text("INSERT INTO orders (id, email, amount) VALUES (:id, :email, :amount)"),
            {"id": order.order_id, "email": order.email, "amount": order.amount},
        )
        sub = await ledger.aenqueue(
            "invoice-email",
            f"order:{order.order_id}",
            {"to": order.email, "amount": order.amount},
            conn=db,
        )
        if order.amount <= 0:  # a check that fails after the email was enqueued
            raise HTTPException(422, "the amount must be positive")
    return {"order_id": order.order_id, "invoice_email": sub.id}


@app.get("/orders/{order_id}/invoice-email")
async def invoice_status(order_id: str) -> dict[str, object]:
    sub = await ledger.aget("invoice-email", f"order:{order_id}")
    if sub is None:
        raise HTTPException(404, "no invoice email for this order")
    return {"status": sub.status.value, "remote_id": sub.remote_id}
