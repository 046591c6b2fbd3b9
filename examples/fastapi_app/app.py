"""An order endpoint that writes the order and enqueues its invoice email in one
transaction, with the worker running beside the app.

    DATABASE_URL=postgresql://postgres@127.0.0.1/shop \\
    MAIL_URL=http://127.0.0.1:8025/send \\
    uvicorn app:app

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

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1/shop")
MAIL_URL = os.environ.get("MAIL_URL", "http://127.0.0.1:8025/send")

ledger = denpyo.Ledger(DATABASE_URL)
mail = HttpChannel(url=MAIL_URL)


@ledger.channel("invoice-email", idempotent=True)
async def send_invoice(sub: denpyo.Submission) -> str | None:
    return await mail.send(sub)


class Order(BaseModel):
    order_id: str
    email: str
    amount: int  # in cents


def async_url(url: str) -> str:
    """The same database for SQLAlchemy's asyncpg dialect."""
    return url.replace("postgresql://", "postgresql+asyncpg://", 1)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    engine = create_async_engine(async_url(DATABASE_URL))
    async with engine.begin() as conn:
        await conn.execute(
            text("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, email TEXT, amount INT)")
        )
    ledger.migrate()
    app.state.engine = engine
    worker = asyncio.create_task(ledger.awork())  # sends what the requests enqueue
    try:
        yield
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
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
